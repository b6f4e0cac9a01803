"""Kueue TAS advice per queue: the level to require or prefer follows the observed spread and job shapes."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.placement.tas_advice import (
    CROSS_NODE,
    PREFERRED,
    REQUIRED,
    LevelFigures,
    TasSettings,
    WorkloadSpread,
    advise_queue,
)
from analytics.recommend import RecommendSettings, recommend
from analytics.run import analyze
from analytics.settings import AnalysisSettings
from collector.backfill import backfill_simulated

END = 1_780_000_200.0
LABELS = {"node": "kubernetes.io/hostname", "rack": "cloud.google.com/gce-topology-subblock",
          "block": "cloud.google.com/gce-topology-block", "zone": "topology.kubernetes.io/zone"}
Q = ("ClusterQueue", "", "team-a")


def job(name: str, devices: int, ge_hours: float, **levels: tuple[int, int, float]) -> WorkloadSpread:
    """A workload with (domains_spanned, min_domains, ge_hours_affected) per level."""
    figures = {lv: LevelFigures(s, m, a) for lv, (s, m, a) in levels.items()}
    return WorkloadSpread("team-a", "ns", "JobSet", name, "H100", devices // 2, devices, ge_hours, figures)


def test_a_spread_gang_job_that_fits_one_block_makes_the_block_required() -> None:
    spread = job("train", 32, 100.0, node=(4, 4, 0.0), rack=(3, 2, 80.0), block=(2, 1, 80.0), zone=(1, 1, 0.0))
    a = advise_queue(Q, "team-a", [spread], LABELS, TasSettings())
    assert (a.action, a.level, a.label, a.annotation) == ("require", "block", LABELS["block"], REQUIRED)
    assert a.worse_share == pytest.approx(0.8)
    assert "spanned 2 block domains where 1 could hold it" in " ".join(a.reasons)


def test_the_level_is_the_innermost_one_every_job_of_the_queue_fits() -> None:
    small = job("small", 8, 50.0, node=(2, 1, 50.0), rack=(1, 1, 0.0), block=(1, 1, 0.0))
    big = job("big", 16, 50.0, node=(2, 2, 0.0), rack=(1, 1, 0.0), block=(1, 1, 0.0))
    a = advise_queue(Q, "team-a", [small, big], LABELS, TasSettings())
    assert (a.action, a.level) == ("require", "rack")  # the 16-GPU job needs two nodes: hostname would starve it


def test_a_rare_spread_is_only_preferred() -> None:
    once = job("train", 16, 100.0, node=(2, 2, 0.0), rack=(2, 1, 10.0), block=(1, 1, 0.0))
    a = advise_queue(Q, "team-a", [once], LABELS, TasSettings(require_share=0.25))
    assert (a.action, a.annotation, a.level) == ("prefer", PREFERRED, "rack")
    assert "only 10%" in a.reasons[0]


def test_nothing_spread_across_nodes_is_a_hold_even_when_numa_is_straddled() -> None:
    pod = job("pod", 4, 24.0, numa=(2, 1, 24.0), node=(1, 1, 0.0), rack=(1, 1, 0.0))
    a = advise_queue(Q, "team-a", [pod], LABELS, TasSettings())
    assert (a.action, a.annotation) == ("hold", None)
    assert any("inside a node" in r and "single-numa-node" in r for r in a.reasons)


def test_a_job_larger_than_any_domain_is_never_required() -> None:
    huge = job("huge", 512, 100.0, node=(64, 64, 0.0), rack=(9, 8, 100.0), block=(3, 2, 100.0), zone=(1, 1, 0.0))
    a = advise_queue(Q, "team-a", [huge], {**LABELS, "zone": None}, TasSettings())
    assert (a.action, a.level) == ("prefer", "rack")
    assert "required would never admit it" in a.reasons[0]


def test_a_level_the_fleet_has_no_label_for_is_never_advised() -> None:
    spread = job("train", 16, 10.0, node=(2, 2, 0.0), rack=(2, 1, 10.0), block=(1, 1, 0.0))
    a = advise_queue(Q, "team-a", [spread], {**LABELS, "rack": None}, TasSettings())
    assert (a.level, a.label) == ("block", LABELS["block"])


levels = st.fixed_dictionaries({}, optional={
    lv: st.tuples(st.integers(1, 4), st.integers(1, 4), st.floats(0, 10)).map(
        lambda t: (max(t[0], t[1]), t[1], t[2])) for lv in CROSS_NODE})


@given(st.lists(st.tuples(st.integers(2, 64), st.floats(0.1, 100), levels), min_size=1, max_size=5),
       st.floats(0, 1))
def test_required_only_where_every_job_fits_one_domain_and_spread_was_seen(
    jobs: list[tuple[int, float, dict[str, tuple[int, int, float]]]], share: float,
) -> None:
    workloads = [job(f"j{i}", d, ge, **lv) for i, (d, ge, lv) in enumerate(jobs)]
    a = advise_queue(Q, "team-a", workloads, LABELS, TasSettings(require_share=share))
    spread_seen = any(f.worse for w in workloads for lv, f in w.levels.items() if lv in CROSS_NODE)
    if a.action == "require":
        assert a.level is not None
        assert all(w.levels[a.level].min_domains == 1 for w in workloads)
        assert spread_seen and a.worse_share >= share
    if not spread_seen:
        assert a.action == "hold"


# -- end to end on the simulated fleet -------------------------------------------------------------------


@pytest.fixture(scope="module")
def recommended(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    db = tmp_path_factory.mktemp("tas") / "fleet.duckdb"
    backfill_simulated(str(db), start=END - 86400, end=END, step=300)
    analyze(db, AnalysisSettings(window_seconds="1d"))
    report = recommend(db, RecommendSettings(window_days=1))
    return db, report.render()


def test_the_simulated_spread_job_makes_its_queue_require_the_subblock(recommended: tuple[Path, str]) -> None:
    db, text = recommended
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT target_kind, target_name, action, recommended_profile, evidence FROM recommendations "
            "WHERE scope = 'topology' ORDER BY target_name"
        ).fetchall()
    assert [(k, n, a, p) for k, n, a, p, _ in rows] == [
        ("ClusterQueue", "foundation", "require", "cloud.google.com/gce-topology-subblock"),  # gpt-pretrain: 16 GPUs
        ("ClusterQueue", "llm-research", "hold", "cloud.google.com/gce-topology-subblock"),  # llama-pretrain: tight
    ]
    evidence = json.loads(rows[0][4])
    assert evidence["annotation"] == REQUIRED
    assert "kueue.x-k8s.io/podset-required-topology: cloud.google.com/gce-topology-subblock" in text


def test_consolidating_the_spread_job_frees_a_whole_node_but_not_its_block(recommended: tuple[Path, str]) -> None:
    db, text = recommended
    with duckdb.connect(str(db), read_only=True) as con:
        evidence = json.loads(con.execute(
            "SELECT evidence FROM recommendations WHERE scope = 'topology' AND target_name = 'foundation'"
        ).fetchone()[0])
    [c] = evidence["consolidations"]
    assert c == {"workload": "foundation/gpt-pretrain", "level": "block", "vacate": "us-east5-a/block-4",
                 "into": "us-east5-a/block-3", "gpus_moved": 8, "frees_whole_domain": False,
                 "nodes_freed": ["gpu-h200-train-2"], "free_in_target": 2}
    assert "bert-distill" not in c["nodes_freed"]  # the A100 node of block-4 stays held
    assert "it has 2 free GPU(s) now, 8 needed" in text


def test_without_an_analysis_run_the_output_says_so(tmp_path: Path) -> None:
    db = tmp_path / "raw.duckdb"
    backfill_simulated(str(db), start=END - 7200, end=END, step=300)
    report = recommend(db, RecommendSettings(window_days=1, store_results=False))
    assert report.topology is None
    assert "no analysis run with placement rows yet (run `gpulens analyze` first)" in report.render()
