"""A placement's pairs are the runs that sample its first time, also where a workload's runs are on two grids.

``held_pairs`` replays a workload's runs of (pod, GPU) pairs in time order. A run samples only the times of
its step from its first time, so where one collector scrapes a node every minute and another every two
minutes, half a minute later, the pairs of one grid are not held at the other's times: each placement is
what was sampled at its time. And a workload whose set changes every minute stores its claims (runs),
not one list of pairs per set.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timedelta

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.facts import Window, bind_facts
from analytics.placement.held_pairs import Held, workloads_seen
from analytics.placement.seen import insert_seen, merge_seen
from analytics.placement.settings import TopologySettings
from analytics.placement.spread import LEVELS, GpuPlace, domains_spanned, place_keys
from analytics.result_tables import create_result_tables
from collector.schema import create_schema, fact_columns
from tests.support.bulk_insert import insert_rows

T0 = datetime(2026, 3, 2)


def _tables(runs: list[tuple[str, str, int, int, int]]) -> duckdb.DuckDBPyConnection:
    """``an_placement_times`` and ``an_placement_runs`` of one workload from its runs (pod, GPU, first and last
    second, step in seconds): its key at each time is the set its runs sample then."""
    con = duckdb.connect()
    con.execute("""CREATE TEMP TABLE an_placement_times (namespace VARCHAR, kind VARCHAR, wname VARCHAR,
                   ts TIMESTAMP, tenant VARCHAR, sig HUGEINT, pairs BIGINT, ge DOUBLE)""")
    con.execute("""CREATE TEMP TABLE an_placement_runs (namespace VARCHAR, kind VARCHAR, wname VARCHAR, pod VARCHAR,
                   gpu_uuid VARCHAR, from_ts TIMESTAMP, to_ts TIMESTAMP, step_us BIGINT)""")
    at: dict[int, set[tuple[str, str]]] = {}
    for pod, gpu, first, last, step in runs:
        for t in range(first, last + 1, step or 1):
            at.setdefault(t, set()).add((pod, gpu))
        con.execute("INSERT INTO an_placement_runs VALUES ('ns', 'PyTorchJob', 'train', ?, ?, ?, ?, ?)",
                    [pod, gpu, T0 + timedelta(seconds=first), T0 + timedelta(seconds=last), step * 1_000_000])
    for t, held in at.items():
        con.execute("INSERT INTO an_placement_times VALUES ('ns', 'PyTorchJob', 'train', ?, 'team', ?, ?, ?)",
                    [T0 + timedelta(seconds=t), hash(frozenset(held)), len(held), float(len(held))])
    return con


def test_runs_on_two_grids_hold_only_their_own_times() -> None:
    con = _tables([("a", "GPU-0", 0, 600, 60), ("a", "GPU-1", 0, 600, 60),  # every minute on the minute
                   ("b", "GPU-2", 30, 630, 120), ("b", "GPU-3", 30, 630, 120)])  # every two minutes, at :30
    (w,) = workloads_seen(con, {})
    unmeasured = (None,) * 6
    assert [(p.samples, p.first_ts, p.held) for p in w.placements] == [
        (11, T0, Held(2, 1, 2, unmeasured)),
        (6, T0 + timedelta(seconds=30), Held(2, 1, 2, unmeasured)),
    ]
    assert w.main_pairs == (("a", "GPU-0"), ("a", "GPU-1"))


def test_a_placement_starting_off_the_grid_holds_the_one_sample_runs_of_its_time() -> None:
    con = _tables([("a", "GPU-0", 0, 600, 60), ("a", "GPU-1", 0, 600, 60),
                   ("c", "GPU-2", 90, 90, 0), ("c", "GPU-3", 90, 90, 0)])  # one sample, between two minutes
    (w,) = workloads_seen(con, {})
    assert [(p.samples, p.first_ts, p.held.devices, p.held.pods) for p in w.placements] == [
        (11, T0, 2, 1), (1, T0 + timedelta(seconds=90), 2, 1)]


def test_a_workload_whose_set_changes_every_minute_stores_its_claims_not_its_sets() -> None:
    """Twenty single-GPU pods of a PyTorchJob, each replaced by a new pod at a minute of its own (every 20
    minutes for 4 hours): a new set every minute, each of 20 pairs; the part stores one run per claim."""
    con = duckdb.connect()
    create_schema(con)
    create_result_tables(con)
    rows = []
    for g in range(20):
        con.execute("INSERT INTO devices (device_id, gpu_uuid, node, kind, profile, gpu_equivalents, sharing_mode) "
                    "VALUES (?, ?, 'n1', 'gpu', 'gpu', 1.0, 'exclusive')", [f"GPU-{g}", f"GPU-{g}"])
        for minute in range(240):
            generation = (minute + g) // 20
            rows.append((T0 + timedelta(minutes=minute), "n1", f"GPU-{g}", f"GPU-{g}", "ns", f"w-{g}-{generation}",
                         "main", "team", "exclusive", 1.0, "PyTorchJob", "train", "test"))
    insert_rows(con, "allocations", fact_columns("allocations"), rows)
    bind_facts(con, None, temporary=True)
    window = Window(T0, T0 + timedelta(days=1), 300)
    con.execute("INSERT INTO analysis_parts VALUES ('day', ?, ?, '', now()::TIMESTAMP, NULL)", [window.start, window.end])
    insert_seen(con, "day", window, TopologySettings())
    merge_seen(con, ["day"], TopologySettings().gang_kinds)
    claims = con.execute("SELECT count(*) FROM allocation_claims").fetchone()
    stored = con.execute("SELECT count(*) FROM part_placement_runs").fetchone()
    pods = {(g, (minute + g) // 20) for g in range(20) for minute in range(240)}
    assert stored == claims == (len(pods),)  # one run per pod: its one claim
    sets = {frozenset((g, (minute + g) // 20) for g in range(20)) for minute in range(240)}
    (w,) = workloads_seen(con, {})
    assert len(w.placements) == len(sets) == 240  # every minute one GPU's pod is replaced: a new set
    assert {(p.samples, p.held.devices, p.held.pods) for p in w.placements} == {(1, 20, 20)}
    assert w.main_pairs == tuple(sorted((f"w-{g}-{g // 20}", f"GPU-{g}") for g in range(20)))  # the earliest


NODES = {"n0": ("r0", [0, 0, 1, 1]), "n1": ("r0", [0, 1, None, 1]), "n2": (None, [0, 0, 0, 0])}
PLACES = {f"GPU-{node}-{i}": GpuPlace(f"GPU-{node}-{i}", node, "H100",
                                      place_keys(node, numa, f"{node}-nv{i // 2}" if i < 3 else None,
                                                 {"rack": rack} if rack else {}))
          for node, (rack, numas) in NODES.items() for i, numa in enumerate(numas)}
run = st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from([*PLACES, "GPU-unknown"]),
                st.integers(0, 20), st.integers(0, 8))


@settings(max_examples=80, deadline=None)
@given(st.lists(run, min_size=1, max_size=14))
def test_each_placement_holds_what_its_runs_sample_at_its_first_time(runs: list[tuple[str, str, int, int]]) -> None:
    """Runs every minute (pods leaving and coming back, a pair in two overlapping runs, GPUs without NUMA,
    NVLink or rack keys, a GPU the inventory does not describe): each placement's pairs, pods, smallest pod
    and domains per level are those of the set sampled at its first time, as ``spread`` counts them."""
    con = _tables([(pod, gpu, 60 * first, 60 * (first + length), 60 if length else 0)
                   for pod, gpu, first, length in runs])
    at: dict[int, set[tuple[str, str]]] = defaultdict(set)
    for pod, gpu, first, length in runs:
        for minute in range(first, first + length + 1):
            at[minute].add((pod, gpu))
    got = {p.first_ts: p.held for w in workloads_seen(con, PLACES) for p in w.placements}
    firsts: dict[frozenset[tuple[str, str]], int] = {}
    for minute in sorted(at):
        firsts.setdefault(frozenset(at[minute]), minute)
    expected = {}
    for held, minute in firsts.items():
        if len(held) < 2:
            continue
        sizes = Counter(pod for pod, _ in held)
        places = [PLACES.get(gpu) for _, gpu in held]
        spanned = tuple(None if None in places else _count(domains_spanned([p for p in places if p], level))
                        for level in LEVELS)
        expected[T0 + timedelta(minutes=minute)] = Held(len(held), len(sizes), min(sizes.values()), spanned)
    assert got == expected


def _count(domains: tuple[str, ...] | None) -> int | None:
    return None if domains is None else len(domains)
