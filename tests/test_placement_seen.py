"""The placements a window's parts give are exactly the distinct (pod, GPU) sets each workload held.

A day part stores, per workload that may be multi-device, the key of its set per sample time and its
allocation claims as runs of (pod, GPU) pairs; the window rebuilds each placement's pairs from the runs
at its first time (``held_pairs``). These tests state what must come out in plain Python (per workload,
each distinct set with its samples, GE-samples, first and last time, pairs, pods and smallest pod; the
longest held first, then the earliest; the first one's pairs) and check it against hypothesis-built days
shaped like real ones: bursty holdings that change minute to minute, missing minutes, a row reported twice, rows
without a sharing mode (the device's own counts), MIG and time-sliced devices and unknown devices (never
a whole exclusive GPU), pods of a LeaderWorkerSet the pod inventory names (one workload, though their
owner chain splits them), pod names that several owners held the same day (another namespace, a missing
owner label), Parquet rows without a pod name or namespace.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.facts import Window, bind_facts
from analytics.placement.held_pairs import WorkloadSeen, workloads_seen
from analytics.placement.seen import insert_seen, merge_seen
from analytics.placement.settings import TopologySettings
from analytics.result_tables import create_result_tables
from collector.schema import create_schema, fact_columns
from tests.support.bulk_insert import insert_rows

START = datetime(2026, 3, 2)
END = START + timedelta(days=1)
DAY = Window(START, END, 300)

DEVICES = [  # device_id, gpu_uuid, kind, sharing_mode
    *[(f"GPU-{i}", f"GPU-{i}", "gpu", "exclusive") for i in range(6)],
    ("GPU-6", "GPU-6", "gpu", None),  # no mode recorded: exclusive unless the row says otherwise
    ("GPU-7", "GPU-7", "gpu", "time-slicing"),
    ("MIG-0", "GPU-8", "mig", "exclusive"),
]
UNKNOWN = ("GPU-X", "GPU-X")  # in allocation rows, not in the inventory
GANG_KINDS = TopologySettings().gang_kinds
Workload = tuple[str, str | None, str | None]
WORKLOADS: list[Workload] = [("ns-a", "Job", "train"), ("ns-a", "StatefulSet", "lws-0"), ("ns-b", None, None)]
SHARED_NAMES: list[Workload] = [  # pods named train-0..2 held by three owners, and a LeaderWorkerSet's pods
    ("ns-a", "Job", "train"), ("ns-b", "Job", "train"), ("ns-a", None, "train"), ("ns-a", "StatefulSet", "lws-0"),
]
"""Owners sharing pod names: the same names in another namespace, and a pod whose owner label is missing on
some rows (its owner becomes a Pod named after the workload); the LeaderWorkerSet's pods are its own."""


def _rows(workloads: list[Workload], devices: tuple[str, ...] = (*(d[0] for d in DEVICES), UNKNOWN[0]),
          modes: tuple[str | None, ...] = (None, "exclusive", "time-slicing"),
          ) -> st.SearchStrategy[list[tuple[int, int, int, str, str | None, float]]]:
    return st.lists(st.tuples(
        st.integers(0, 29),  # minute of the day
        st.integers(0, len(workloads) - 1),
        st.integers(0, 2),  # pod of that workload
        st.sampled_from(devices),
        st.sampled_from(modes),
        st.sampled_from([1.0, 0.5]),
    ), max_size=80, unique_by=lambda r: (r[0], workloads[r[1]][0], f"{workloads[r[1]][2] or 'bare'}-{r[2]}", r[3]))
    # unique as the store keeps allocations: one row per device, time and holder


def _store(rows: list[tuple[int, int, int, str, str | None, float]], gang: bool,
           workloads: list[Workload] = WORKLOADS, sidecar: frozenset[int] = frozenset()) -> duckdb.DuckDBPyConnection:
    """A store of these rows; the rows at the indices ``sidecar`` are held a second time by the pod's container
    ``sidecar`` (the same pod on the same GPU from two claims at once)."""
    con = duckdb.connect()
    create_schema(con)
    for device, gpu, kind, mode in DEVICES:
        con.execute("INSERT INTO devices (device_id, gpu_uuid, node, kind, profile, gpu_equivalents, sharing_mode) "
                    "VALUES (?, ?, 'n1', ?, 'gpu', 1.0, ?)", [device, gpu, kind, mode])
    gpu_of = {d[0]: d[1] for d in DEVICES} | {UNKNOWN[0]: UNKNOWN[1]}
    held = []
    for i, (minute, w, pod, device, mode, ge) in enumerate(rows):
        ns, kind, name = workloads[w]
        for container in ("main", "sidecar") if i in sidecar else ("main",):
            held.append((START + timedelta(minutes=minute), "n1", gpu_of[device], device, ns, f"{name or 'bare'}-{pod}",
                         container, f"t-{ns}", mode, ge, kind, name, "test"))
    insert_rows(con, "allocations", fact_columns("allocations"), held)
    if gang:  # the inventory names the StatefulSet's pods as one LeaderWorkerSet (newest snapshot wins)
        for pod in range(3):
            for ts, kind in ((START - timedelta(hours=1), "Job"), (START, "LeaderWorkerSet")):
                con.execute("INSERT INTO pod_snapshots (ts, namespace, pod, workload_kind, workload_name, source) "
                            "VALUES (?, 'ns-a', ?, ?, 'llm', 'test')", [ts, f"lws-0-{pod}", kind])
    bind_facts(con, None, temporary=True)
    return con


Placement = tuple[object, ...]
"""(namespace, kind, workload, tenant, samples, GE-samples, first, last, pairs, pods, smallest pod)."""


def seen_in(con: duckdb.DuckDBPyConnection, window: Window = DAY) -> list[WorkloadSeen]:
    """What the window's one part gives: the part stored, merged and its placements rebuilt."""
    create_result_tables(con)
    con.execute("INSERT INTO analysis_parts VALUES ('day', ?, ?, '', now()::TIMESTAMP, NULL)", [window.start, window.end])
    insert_seen(con, "day", window, TopologySettings())
    merge_seen(con, ["day"], GANG_KINDS)
    return workloads_seen(con, {})


def _flat(workloads: list[WorkloadSeen]) -> tuple[list[Placement], dict[tuple[str, str, str], tuple[tuple[str, str], ...]]]:
    rows = [(w.namespace, w.kind, w.workload, p.tenant, p.samples, p.ge_samples, p.first_ts, p.last_ts,
             p.held.devices, p.held.pods, p.held.smallest_pod) for w in workloads for p in w.placements]
    return rows, {(w.namespace, w.kind, w.workload): w.main_pairs for w in workloads}


def _seen_from(rows: list[tuple[int, int, int, str, str | None, float]], gang: bool,
               workloads: list[Workload] | None = None) -> tuple[list[Placement], dict[tuple[str, str, str], tuple[tuple[str, str], ...]]]:
    """The placements found in a store of these rows, and each workload's main pairs."""
    con = _store(rows, gang) if workloads is None else _store(rows, gang, workloads)
    try:
        return _flat(seen_in(con))
    finally:
        con.close()


def _expected(rows: list[tuple[int, int, int, str, str | None, float]], gang: bool,
              workloads: list[Workload] = WORKLOADS) -> tuple[list[Placement], dict[tuple[str, str, str], tuple[tuple[str, str], ...]]]:
    """The definition, in plain Python: per workload, each distinct set of (pod, GPU) pairs it held at a
    sample time (two pairs or more), with its samples, GE-samples, first and last time, pairs, pods and
    smallest pod, the longest held first (then the earliest); and the first one's pairs."""
    modes = {d[0]: (d[2], d[3]) for d in DEVICES}
    gpu_of = {d[0]: d[1] for d in DEVICES}
    at: dict[tuple[str, str, str, datetime], list[tuple[str, str, float]]] = defaultdict(list)
    for minute, w, pod, device, mode, ge in rows:
        if device not in modes or modes[device][0] != "gpu" or (mode or modes[device][1] or "exclusive") != "exclusive":
            continue
        ns, kind, name = workloads[w]
        pod_name = f"{name or 'bare'}-{pod}"
        owner = ("LeaderWorkerSet", "llm") if gang and (ns, name) == ("ns-a", "lws-0") else (kind or "Pod", name or pod_name)
        at[(ns, *owner, START + timedelta(minutes=minute))].append((pod_name, gpu_of[device], ge))
    # only owners that can be multi-device: a gang kind, or a pod holding 2+ GPUs in the span
    gpus_of_pod: dict[tuple[object, ...], set[str]] = defaultdict(set)
    for key, held in at.items():
        for pod_name, gpu, _ in held:
            gpus_of_pod[(*key[:3], pod_name)].add(gpu)
    multi = {key[:3] for key, gpus in gpus_of_pod.items() if len(gpus) >= 2}
    multi |= {key[:3] for key in at if key[1] in GANG_KINDS}
    groups: dict[tuple[object, ...], list[tuple[datetime, list[tuple[str, str, float]]]]] = defaultdict(list)
    for (ns, kind, name, ts), held in at.items():
        if len({(p, g) for p, g, _ in held}) >= 2 and (ns, kind, name) in multi:  # two pairs, not two rows
            groups[(ns, kind, name, frozenset((p, g) for p, g, _ in held))].append((ts, held))
    out: dict[tuple[str, str, str], list[tuple[object, ...]]] = defaultdict(list)
    for (ns, kind, name, _), times in groups.items():
        times.sort()
        pairs = sorted({(p, g) for p, g, _ in times[0][1]})
        pods = Counter(p for p, _ in pairs)
        out[(ns, kind, name)].append((len(times), times[0][0], (ns, kind, name, f"t-{ns}", len(times),
                                      sum(ge for _, held in times for _, _, ge in held), times[0][0], times[-1][0],
                                      len(pairs), len(pods), min(pods.values())), tuple(pairs)))
    flat, main = [], {}
    for owner in sorted(out):
        ordered = sorted(out[owner], key=lambda p: (-p[0], p[1]))  # the longest held first, then the earliest
        flat += [p[2] for p in ordered]
        main[owner] = ordered[0][3]
    return flat, main


@settings(max_examples=60, deadline=None)
@given(rows=_rows(WORKLOADS), gang=st.booleans())
def test_each_workloads_distinct_placements_are_seen_once_with_their_pairs(
    rows: list[tuple[int, int, int, str, str | None, float]], gang: bool
) -> None:
    assert _seen_from(rows, gang) == _expected(rows, gang)


@settings(max_examples=60, deadline=None)
@given(rows=_rows(SHARED_NAMES), gang=st.booleans())
def test_owners_sharing_pod_names_each_see_their_own_placements(
    rows: list[tuple[int, int, int, str, str | None, float]], gang: bool
) -> None:
    """A pod's name does not say its owner when another owner held the same name that day: each row is
    still counted for the owner it names (or the LeaderWorkerSet the inventory puts it in)."""
    assert _seen_from(rows, gang, SHARED_NAMES) == _expected(rows, gang, SHARED_NAMES)


@settings(max_examples=40, deadline=None)
@given(rows=_rows(SHARED_NAMES, devices=("GPU-0", "GPU-1", "GPU-2", "GPU-6"), modes=(None, "exclusive")),
       gang=st.booleans())
def test_a_fleet_of_exclusive_whole_gpus_sees_the_same_placements(
    rows: list[tuple[int, int, int, str, str | None, float]], gang: bool
) -> None:
    """The common shape (every row an exclusive whole GPU, so a pod's rows are all its owner's) lets the
    rows be found by namespace and pod alone: the placements are the same as by the definition."""
    assert _seen_from(rows, gang, SHARED_NAMES) == _expected(rows, gang, SHARED_NAMES)


@settings(max_examples=40, deadline=None)
@given(rows=_rows(WORKLOADS), twice=st.sets(st.integers(0, 79)), gang=st.booleans())
def test_a_pod_holding_one_gpu_from_two_containers_counts_the_pair_once_and_the_ge_of_both_rows(
    rows: list[tuple[int, int, int, str, str | None, float]], twice: set[int], gang: bool
) -> None:
    """Two claims of one pod on one GPU at once (a second container): the placement's pairs are the same set,
    its GE-samples count every row, as the definition says of a row reported twice."""
    sidecar = frozenset(i for i in twice if i < len(rows))
    con = _store(rows, gang, sidecar=sidecar)
    try:
        assert _flat(seen_in(con)) == _expected(rows + [rows[i] for i in sorted(sidecar)], gang)
    finally:
        con.close()


def test_the_same_pod_names_in_two_namespaces_are_two_workloads() -> None:
    """Job train in ns-a and Job train in ns-b run pods named train-0 and train-1 on the same two GPUs, one
    after the other, and each once ran a pod on two GPUs: each Job saw its own placements, with its own samples."""
    a = [(m, 0, p, f"GPU-{p}", "exclusive", 1.0) for m in range(3) for p in range(2)]  # ns-a: minutes 0-2
    a += [(9, 0, 1, "GPU-2", "exclusive", 1.0), (9, 0, 1, "GPU-3", "exclusive", 1.0)]  # train-1 of ns-a: 2 GPUs
    b = [(m, 1, p, f"GPU-{p}", "exclusive", 1.0) for m in range(3, 8) for p in range(2)]  # ns-b: minutes 3-7
    b += [(8, 1, 0, "GPU-0", "exclusive", 1.0), (8, 1, 0, "GPU-1", "exclusive", 1.0)]  # train-0 of ns-b: 2 GPUs
    got = _seen_from(a + b, gang=False, workloads=SHARED_NAMES)
    at = [START + timedelta(minutes=m) for m in range(10)]
    assert got[0] == [
        ("ns-a", "Job", "train", "t-ns-a", 3, 6.0, at[0], at[2], 2, 2, 1),
        ("ns-a", "Job", "train", "t-ns-a", 1, 2.0, at[9], at[9], 2, 1, 2),
        ("ns-b", "Job", "train", "t-ns-b", 5, 10.0, at[3], at[7], 2, 2, 1),
        ("ns-b", "Job", "train", "t-ns-b", 1, 2.0, at[8], at[8], 2, 1, 2),
    ]
    pairs = (("train-0", "GPU-0"), ("train-1", "GPU-1"))
    assert got[1] == {("ns-a", "Job", "train"): pairs, ("ns-b", "Job", "train"): pairs}
    assert got == _expected(a + b, False, SHARED_NAMES)


def test_a_day_without_allocations_sees_no_placement() -> None:
    con = _store([], gang=False)
    try:
        assert seen_in(con) == []
    finally:
        con.close()


def test_placements_from_parquet_facts_with_decimal_gpu_equivalents_are_stored_as_numbers(tmp_path: Path) -> None:
    """Parquet written by other tools may hold GPU-equivalents as DECIMAL (a literal 0.5 in SQL is one):
    the stored GE-samples are the same numbers as from the store's DOUBLE column."""
    rows = [(m, 0, 0, f"GPU-{p}", "exclusive", 0.5) for m in range(3) for p in range(2)]  # one pod, 2 GPUs
    store = _store(rows, gang=False)
    create_result_tables(store)
    folder = tmp_path / "facts" / "allocations" / f"day={START.date()}"
    folder.mkdir(parents=True)
    copy = "COPY (SELECT * REPLACE (CAST(gpu_equivalents AS DECIMAL(3, 1)) AS gpu_equivalents) FROM allocations) TO "
    store.execute(copy + f"'{folder / 'part-0.parquet'}' (FORMAT parquet)")
    try:
        insert_seen(store, "from-store", Window(START, END, 300), TopologySettings())
        bind_facts(store, tmp_path / "facts", temporary=True)
        assert store.execute("SELECT typeof(gpu_equivalents) FROM f_allocations LIMIT 1").fetchone() == ("DECIMAL(3,1)",)
        insert_seen(store, "from-parquet", Window(START, END, 300), TopologySettings())
        got = store.execute(
            "SELECT part_id, namespace, kind, wname, count(*), sum(pairs), sum(ge), typeof(sum(ge)) "
            "FROM part_placement_times GROUP BY ALL ORDER BY part_id"
        ).fetchall()
    finally:
        store.close()
    assert got == [("from-parquet", "ns-a", "Job", "train", 3, 6, 3.0, "DOUBLE"),
                   ("from-store", "ns-a", "Job", "train", 3, 6, 3.0, "DOUBLE")]


def test_parquet_rows_without_a_pod_name_count_for_their_owner_and_without_a_namespace_for_none(
    tmp_path: Path,
) -> None:
    """Parquet written by other tools may leave a pod name or a namespace out (the store never does): a row
    without a pod name still belongs to the workload it names (its GE-samples count; its pair is not listed),
    and a workload without a namespace is no workload."""
    rows = [(m, 0, 0, f"GPU-{g}", "exclusive", 1.0) for m in range(3) for g in range(3)]  # train-0 on 3 GPUs
    rows += [(m, 2, 0, f"GPU-{g}", "exclusive", 1.0) for m in range(3) for g in (3, 4)]  # ns-b's pod on 2 GPUs
    store = _store(rows, gang=False)
    folder = tmp_path / "facts" / "allocations" / f"day={START.date()}"
    folder.mkdir(parents=True)
    blanked = ("SELECT * REPLACE (CASE WHEN device_id = 'GPU-2' THEN NULL ELSE pod END AS pod, "
               "nullif(namespace, 'ns-b') AS namespace) FROM allocations")
    store.execute(f"COPY ({blanked}) TO '{folder / 'part-0.parquet'}' (FORMAT parquet)")
    try:
        bind_facts(store, tmp_path / "facts", temporary=True)
        got = _flat(seen_in(store))
    finally:
        store.close()
    assert got == ([("ns-a", "Job", "train", "t-ns-a", 3, 9.0, START, START + timedelta(minutes=2), 2, 1, 2)],
                   {("ns-a", "Job", "train"): (("train-0", "GPU-0"), ("train-0", "GPU-1"))})


def test_the_placement_pairs_an_earlier_release_stored_are_dropped() -> None:
    """An earlier release kept every placement with its pairs (``part_placements``, ``part_placement_pairs``);
    its parts are computed again (another part version), so opening the store drops those tables."""
    con = duckdb.connect()
    con.execute("CREATE TABLE part_placements (part_id VARCHAR, sig VARCHAR[])")
    con.execute("CREATE TABLE part_placement_pairs (part_id VARCHAR, pairs VARCHAR[])")
    con.execute("INSERT INTO part_placements VALUES ('old', ['pod|GPU-0', 'pod|GPU-1'])")
    create_result_tables(con)
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert {"part_placement_runs", "part_placement_times", "part_placement_pods"} <= tables
    assert not tables & {"part_placements", "part_placement_pairs"}
