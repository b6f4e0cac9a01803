"""Placement by topology: the simulated fleet's known bad placements are found exactly; the figures obey their rules."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.placement.spread import (
    LEVELS,
    GpuPlace,
    distance_score,
    domains_spanned,
    min_domains,
    place_keys,
)
from analytics.run import analyze
from analytics.settings import AnalysisSettings


@pytest.fixture(scope="module")
def analysed_store(placement_store: Path) -> Path:
    """The session's analysed simulated day (tests.support.placement_fleet), read-only: copy it to write."""
    return placement_store


def _worse(db: Path) -> set[tuple[str, str, int, int]]:
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT workload, level, domains_spanned, min_domains FROM placement WHERE placed_worse"
        ).fetchall()
    return {(w, lvl, int(s), int(m)) for w, lvl, s, m in rows}


def test_the_simulated_bad_placements_are_found_exactly(analysed_store: Path) -> None:
    assert _worse(analysed_store) == {
        ("gpt-pretrain", "block", 2, 1),   # 8 pods x 2 GPUs on block-3 and block-4; block-3 holds 16 GPUs
        ("gpt-pretrain", "rack", 2, 1),    # same, one sub-block each
        ("moe-finetune", "numa", 2, 1),    # 4-GPU pod on GPUs 2-5: NUMA 0 and 1
        ("rl-reward", "numa", 2, 1),       # 2-GPU pod on GPUs 0 and 7
        ("bert-distill", "nvlink", 3, 2),  # A100 PCIe: pod on GPUs 1+2 crosses two NVLink pairs
        ("bert-distill", "numa", 2, 1),    # its two pods sit on both NUMA nodes; 4 GPUs fit one
    }


def test_a_well_placed_multi_node_job_is_measured_and_not_flagged(analysed_store: Path) -> None:
    with duckdb.connect(str(analysed_store), read_only=True) as con:
        rows = con.execute(
            "SELECT level, domains_spanned, min_domains, placed_worse, nodes, devices FROM placement "
            "WHERE workload = 'llama-pretrain' ORDER BY level"
        ).fetchall()
    assert {r[0] for r in rows} == set(LEVELS)
    assert all(not worse and nodes == 2 and devices == 16 for _, _, _, worse, nodes, devices in rows)
    assert ("node", 2, 2) in {(lvl, s, m) for lvl, s, m, *_ in rows}


def test_ge_hours_affected_are_the_hours_held_in_the_worse_placement(analysed_store: Path) -> None:
    with duckdb.connect(str(analysed_store), read_only=True) as con:
        rows = dict(con.execute(
            "SELECT level, ge_hours_affected FROM placement WHERE workload = 'moe-finetune'"
        ).fetchall())
    assert rows["numa"] == pytest.approx(4 * 24.0)  # 4 GPUs, all day
    assert rows["node"] == 0.0


def test_free_gpus_split_across_numa_and_nvlink_domains_are_stranded(analysed_store: Path) -> None:
    with duckdb.connect(str(analysed_store), read_only=True) as con:
        stranded = set(con.execute(
            "SELECT level, domain, stranded_gpus, parent_free_gpus, smallest_shape_gpus FROM topology_stranded "
            "WHERE stranded_gpus > 0"
        ).fetchall())
    assert stranded == {
        ("numa", "gpu-h200-train-1/numa-0", 1, 2, 2),  # GPUs 1 and 6 free, one per NUMA node
        ("numa", "gpu-h200-train-1/numa-1", 1, 2, 2),
        ("nvlink", "gpu-a100-pcie-0/nvlink-0", 1, 4, 2),  # GPUs 0 and 3 free, each without its pair
        ("nvlink", "gpu-a100-pcie-0/nvlink-2", 1, 4, 2),
    }


def test_a_gpu_without_topology_readings_leaves_its_levels_unmeasured(analysed_store: Path, tmp_path: Path) -> None:
    db = tmp_path / "old-exporter.duckdb"
    shutil.copy(analysed_store, db)
    with duckdb.connect(str(db)) as con:  # an older exporter: no topology for the A100 PCIe node
        con.execute("DELETE FROM gpu_topology WHERE node = 'gpu-a100-pcie-0'")
    analyze(db, AnalysisSettings(window_seconds="1d"))
    with duckdb.connect(str(db), read_only=True) as con:
        levels = {r[0] for r in con.execute(
            "SELECT DISTINCT level FROM placement WHERE workload = 'bert-distill' "
            "AND run_id = (SELECT run_id FROM analysis_runs ORDER BY created_at DESC LIMIT 1)"
        ).fetchall()}
    assert levels == {"node", "rack", "block", "zone"}  # nvlink and numa: not measured, not guessed


# -- properties -----------------------------------------------------------------------------------------


@st.composite
def fleets(draw: st.DrawFn) -> list[GpuPlace]:
    """A nested fleet: zones > blocks > racks > nodes of 4 or 8 GPUs, 2 NUMA nodes, NVSwitch or NVLink pairs."""
    places = []
    for z in range(draw(st.integers(1, 2))):
        for b in range(draw(st.integers(1, 3))):
            for r in range(draw(st.integers(1, 2))):
                for n in range(draw(st.integers(1, 3))):
                    node = f"n{z}{b}{r}{n}"
                    gpus = draw(st.sampled_from([4, 8]))
                    pairs = draw(st.booleans())
                    for i in range(gpus):
                        nvlink = f"{node}/nvlink-{i // 2 * 2}" if pairs else f"{node}/nvlink-0"
                        labels = {"zone": f"z{z}", "block": f"b{b}", "rack": f"r{r}"}
                        places.append(GpuPlace(f"{node}-{i}", node, "H100",
                                               place_keys(node, i * 2 // gpus, nvlink, labels)))
    return places


@st.composite
def placements(draw: st.DrawFn) -> tuple[list[GpuPlace], list[GpuPlace], list[int]]:
    """A fleet and a workload on it: pods of k GPUs, each pod on one node."""
    fleet = draw(fleets())
    by_node: dict[str, list[GpuPlace]] = {}
    for p in fleet:
        by_node.setdefault(p.node, []).append(p)
    k = draw(st.integers(1, 4))
    held: list[GpuPlace] = []
    pods: list[int] = []
    for node in draw(st.lists(st.sampled_from(sorted(by_node)), min_size=1, max_size=6)):
        free = [p for p in by_node[node] if p not in held]
        if len(free) >= k:
            held.extend(draw(st.permutations(free))[:k])
            pods.append(k)
    return fleet, held, pods


@settings(max_examples=150, deadline=None)
@given(placements())
def test_min_domains_never_exceeds_domains_spanned(case: tuple[list[GpuPlace], list[GpuPlace], list[int]]) -> None:
    fleet, held, pods = case
    if not held:
        return
    for level in LEVELS:
        spanned = domains_spanned(held, level)
        least = min_domains(level, len(held), pods, fleet)
        assert spanned is not None and least is not None
        assert 1 <= least <= len(spanned), level


@settings(max_examples=150, deadline=None)
@given(fleets(), st.data())
def test_a_placement_inside_one_domain_scores_better_than_one_that_leaves_it(
    fleet: list[GpuPlace], data: st.DataObject
) -> None:
    """For every level that nests (NVLink inside node inside rack ...). NUMA does not: an NVSwitch joins GPUs
    of both NUMA nodes, so two GPUs across NUMA are as close to each other as two inside one."""
    level = data.draw(st.sampled_from([lvl for lvl in LEVELS if lvl != "numa"]))
    by_domain: dict[str, list[GpuPlace]] = {}
    for p in fleet:
        by_domain.setdefault(str(p.key(level)), []).append(p)
    n = data.draw(st.integers(2, 6))
    inside_domains = [d for d, ps in by_domain.items() if len(ps) >= n]
    if not inside_domains or len(by_domain) < 2:
        return
    inside = data.draw(st.permutations(by_domain[data.draw(st.sampled_from(sorted(inside_domains)))]))[:n]
    spread_out = data.draw(st.lists(st.sampled_from(fleet), min_size=n, max_size=n, unique_by=lambda p: p.gpu_uuid))
    if len({p.key(level) for p in spread_out}) < 2:
        return
    inside_score, spread_score = distance_score(inside), distance_score(spread_out)
    assert inside_score is not None and spread_score is not None
    assert inside_score < spread_score
