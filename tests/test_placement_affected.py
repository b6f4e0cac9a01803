"""A workload's GE-hours affected at a level add up the hours of every placement of it spread worse there.

Stated placement by placement with the pure functions of ``spread.py``: a distinct placement (its
(pod, GPU) pairs; the same set on two days is one placement) counts at a level when every GPU of it is
described, every GPU has a key at that level, the fleet gives its fewest domains there and it spans more
than that; its GE-hours are added in the order the placements are listed (longest held first, then the
earliest). The placements reach ``assess`` as the window's parts give them: each set's key per sample
time and its pairs as runs (one per pair and block of minutes), never as lists of pairs. Checked
on workloads shaped like real ones: pods restarting onto other GPUs minute to minute, a pod leaving and
coming back, the same set on two days, a GPU the inventory does not describe, GPUs without NUMA or
NVLink readings, nodes without rack labels, pod names holding '|', a GPU listed under two pods.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta

import duckdb
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from analytics.facts import Window, bind_facts
from analytics.placement.run import assess, fleet_places
from analytics.placement.settings import TopologySettings
from analytics.placement.spread import LEVELS, FleetShapes, GpuPlace, domains_spanned, min_domains
from collector.schema import create_schema

START = datetime(2026, 3, 2)
WINDOW = Window(START, START + timedelta(days=2), 300)
INTERVAL = 60.0
RACK = "topology.kubernetes.io/rack"
NODES = {  # node -> (rack label or None, [(numa, nvlink) per GPU])
    "n0": ("r0", [(0, "n0-nv0"), (0, "n0-nv0"), (1, "n0-nv1"), (1, "n0-nv1")]),
    "n1": ("r0", [(0, "n1-nv0"), (0, "n1-nv0"), (None, "n1-nv1"), (1, None)]),
    "n2": (None, [(0, "n2-nv0"), (0, "n2-nv0"), (1, "n2-nv0"), (1, "n2-nv0")]),
}
GPUS = [f"GPU-{node}-{i}" for node, (_, gpus) in NODES.items() for i in range(len(gpus))]
PODS = ["w-0", "w-1", "w-10", "a|b", "w", "x\ny"]
"""Pod names whose 'pod|GPU' pairs do not sort pod by pod ('w-1|...' < 'w-10|...' < 'w-1|...'), one holding '|',
one a line break (the store holds what it was given)."""

placement = st.lists(st.tuples(st.sampled_from(PODS), st.sampled_from([*GPUS, "GPU-unknown"])),
                     min_size=2, max_size=8, unique=True)
workload = st.tuples(
    st.sampled_from(["PyTorchJob", "Job"]),
    st.lists(st.tuples(placement, st.integers(1, 90), st.sampled_from([0.5, 1.0, 1.0 / 3.0]), st.booleans()),
             min_size=1, max_size=8),
)


def _store(workloads: list[tuple[str, list[tuple[list[tuple[str, str]], int, float, bool]]]]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    create_schema(con)
    for node, (rack, gpus) in NODES.items():
        con.execute("INSERT INTO nodes (node, labels) VALUES (?, ?)", [node, json.dumps({RACK: rack} if rack else {})])
        for i, (numa, nvlink) in enumerate(gpus):
            gpu = f"GPU-{node}-{i}"
            con.execute("INSERT INTO gpus (gpu_uuid, node, gpu_model, sharing_mode) VALUES (?, ?, 'H100', 'exclusive')",
                        [gpu, node])
            con.execute("INSERT INTO gpu_topology (gpu_uuid, node, numa_node, nvlink_domain) VALUES (?, ?, ?, ?)",
                        [gpu, node, numa, nvlink])
    con.execute("CREATE TEMP TABLE an_models (alias VARCHAR, short VARCHAR)")
    con.execute("""CREATE TEMP TABLE an_placement_times (namespace VARCHAR, kind VARCHAR, wname VARCHAR,
                   ts TIMESTAMP, tenant VARCHAR, sig HUGEINT, pairs BIGINT, ge DOUBLE)""")
    con.execute("""CREATE TEMP TABLE an_placement_runs (namespace VARCHAR, kind VARCHAR, wname VARCHAR, pod VARCHAR,
                   gpu_uuid VARCHAR, from_ts TIMESTAMP, to_ts TIMESTAMP, step_us BIGINT)""")
    con.execute("CREATE TEMP TABLE an_gpu_last (gpu_uuid VARCHAR, ts TIMESTAMP, free BOOLEAN)")  # no GPU sampled
    for w, (kind, placements) in enumerate(workloads):
        for n, (pairs, samples, ge, twice) in enumerate(placements):
            held = sorted(set(pairs))
            key = hash(tuple(held))
            for day in range(2 if twice else 1):  # the same set on a second day: one placement
                first = START + timedelta(days=day, minutes=100 * n)  # one block of minutes per placement
                con.executemany(  # the block's GE-samples at its first minute: their sum is that number exactly
                    "INSERT INTO an_placement_times VALUES ('ns', ?, ?, ?, 'team', ?, ?, ?)",
                    [[kind, f"job-{w}", first + timedelta(minutes=m), key, len(held), samples * len(held) * ge if m == 0 else 0.0]
                     for m in range(samples)])
                con.executemany("INSERT INTO an_placement_runs VALUES ('ns', ?, ?, ?, ?, ?, ?, ?)",
                                [[kind, f"job-{w}", pod, gpu, first, first + timedelta(minutes=samples - 1),
                                  60_000_000 if samples > 1 else 0] for pod, gpu in held])
    bind_facts(con, None, temporary=True)
    return con


def _expected(con: duckdb.DuckDBPyConnection, kind: str, placements: list[tuple[list[tuple[str, str]], int, float, bool]],
              places: dict[str, GpuPlace]) -> dict[str, float] | None:
    """Level -> GE-hours affected of one workload, placement by placement; None when it gets no rows."""
    merged: dict[tuple[str, ...], list[float]] = {}
    for n, (pairs, samples, ge, twice) in enumerate(placements):
        sig = tuple(sorted({f"{pod}|{gpu}" for pod, gpu in pairs}))
        days = 2 if twice else 1
        m = merged.setdefault(sig, [0, 0.0, n])  # first held in the block of its first listing
        for _ in range(days):
            m[0] += samples
            m[1] += samples * len(sig) * ge
    ordered = sorted(merged.items(), key=lambda kv: (-kv[1][0], kv[1][2]))
    split = [([item.rpartition("|")[2] for item in sig], list(Counter(item.rpartition("|")[0] for item in sig).values()),
              ge_samples * INTERVAL / 3600.0) for sig, (_, ge_samples, _) in ordered]
    main_gpus, main_pods, _ = split[0]
    if not (len(main_gpus) >= 2 and (kind in TopologySettings().gang_kinds or max(main_pods) >= 2)):
        return None
    if not all(g in places for g in main_gpus):
        return None
    fleet = FleetShapes(list(places.values()))
    affected: dict[str, float] = {}
    for gpus, pods, hours in split:
        if not all(g in places for g in gpus):
            continue
        held = [places[g] for g in gpus]
        for level in LEVELS:
            used = domains_spanned(held, level)
            least = min_domains(level, len(held), pods, fleet)
            if used is not None and least is not None and least < len(used):
                affected[level] = affected.get(level, 0.0) + hours
    return affected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(workload, min_size=1, max_size=3))
@example([("PyTorchJob", [([("w-1", "GPU-n0-0"), ("w-10", "GPU-n1-0"), ("w-1", "GPU-n2-0")], 30, 1.0, True),
                          ([("w-1", "GPU-n0-0"), ("w-1", "GPU-n0-1")], 30, 1.0 / 3.0, False),
                          ([("a|b", "GPU-n0-0"), ("a|b", "GPU-n1-2"), ("w", "GPU-unknown")], 5, 0.5, False)])])
@example([("Job", [([("w-0", "GPU-n0-0"), ("w-0", "GPU-n2-3"), ("w-1", "GPU-n0-0"), ("x\ny", "GPU-n2-0")], 10, 1.0, False),
                   ([("w-0", "GPU-n1-3"), ("w-1", "GPU-n1-1")], 40, 0.5, True)])])
def test_ge_hours_affected_add_up_every_placement_spread_worse(
    workloads: list[tuple[str, list[tuple[list[tuple[str, str]], int, float, bool]]]],
) -> None:
    con = _store(workloads)
    try:
        places = fleet_places(con, TopologySettings())
        findings, _ = assess(con, WINDOW, INTERVAL, TopologySettings())
        for w, (kind, placements) in enumerate(workloads):
            expected = _expected(con, kind, placements, places)
            got = {f.spread.level: f.ge_hours_affected for f in findings if f.workload == f"job-{w}"}
            if expected is None:
                assert got == {}
            else:
                assert got, f"job-{w} has no rows"
                assert got == {level: expected.get(level, 0.0) for level in got}
    finally:
        con.close()
