"""Placement findings of one window from the store: rows of ``placement`` and ``topology_stranded``.

Reads whole-GPU, exclusive allocations (MIG instances and shared replicas have no NVLink peers of
their own), groups them by owner (namespace, workload kind, workload name; where the pod inventory
names a LeaderWorkerSet or pod group, see ``gpulens/core/tenancy/gangs.py``, that group), and, per distinct
placement (the set of pod/GPU pairs held at a sample time), measures every topology level with
:mod:`analytics.placement.spread`. A workload's row per level describes the placement it held
longest; ``ge_hours_affected`` adds up every placement of it that spanned more domains than needed
(:mod:`analytics.placement.affected`, all of a workload's placements at once).

Stranded by topology is measured at the newest GPU sample of the window (``topology_stranded``).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

import duckdb

from analytics.facts import Window
from analytics.placement.affected import affected_hours
from analytics.placement.settings import TopologySettings
from analytics.placement.spread import FleetShapes, GpuPlace, LevelSpread, distance_score, place_keys, spread
from analytics.placement.stranded import StrandedRow, stranded_by_topology
from analytics.result_tables import append_columns, column_names, insert_columns
from collector.allocation_claims import SAMPLES_IN_SPAN, SPAN_CLAIMS
from gpulens.core.tenancy.gangs import GROUP_KINDS


@dataclass(frozen=True)
class Placement:
    """One distinct placement of one workload: its (pod, GPU) pairs, how long and how much it was held."""

    pairs: tuple[str, ...]
    """Its 'pod|GPU' pairs, sorted (as a day part lists them)."""
    samples: int
    ge_hours: float
    first_ts: datetime
    last_ts: datetime

    @cached_property
    def _split(self) -> tuple[tuple[str, ...], tuple[int, ...]]:
        # 'pod|gpu' split at the last |; the list is sorted, so a pod's pairs are adjacent (they share the
        # prefix 'pod|'): the GPUs come grouped by pod, and counting the pods in order gives each pod's size
        pods, _, gpus = zip(*(item.rpartition("|") for item in self.pairs), strict=True)
        return tuple(gpus), tuple(Counter(pods).values())

    @property
    def gpus(self) -> tuple[str, ...]:
        """Its GPUs, grouped by pod."""
        return self._split[0]

    @property
    def pod_sizes(self) -> tuple[int, ...]:
        """GPUs of each pod, in the order of ``gpus``."""
        return self._split[1]


@dataclass(frozen=True)
class Finding:
    """One workload at one level."""

    tenant: str
    namespace: str
    workload_kind: str
    workload: str
    gpu_model: str
    pods: int
    devices: int
    nodes: int
    spread: LevelSpread
    distance_score: float | None
    ge_hours: float
    ge_hours_affected: float
    placements: int
    first_ts: datetime
    last_ts: datetime

    @property
    def reason(self) -> str:
        s = self.spread
        if s.excess <= 0:
            return f"{s.domains_spanned} {s.level} domain(s), the fewest its {self.devices} GPUs fit in"
        return (f"{s.domains_spanned} {s.level} domains where {s.min_domains} could hold its {self.devices} GPUs "
                f"({self.pods} pod(s)); {', '.join(s.domains[:4])}{' ...' if len(s.domains) > 4 else ''}")


def _labels(text: str | None) -> dict[str, str]:
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def fleet_places(con: duckdb.DuckDBPyConnection, settings: TopologySettings) -> dict[str, GpuPlace]:
    """Every exclusive whole GPU the store knows, with its domain key at each level."""
    rows = con.execute(
        """
        SELECT g.gpu_uuid, g.node, coalesce(m.short, g.gpu_model, ''), t.numa_node, t.nvlink_domain, n.labels
        FROM gpus g
        LEFT JOIN gpu_topology t USING (gpu_uuid)
        LEFT JOIN nodes n ON n.node = g.node
        LEFT JOIN an_models m ON m.alias = g.gpu_model
        WHERE coalesce(g.sharing_mode, 'exclusive') = 'exclusive'
        """
    ).fetchall()
    level_labels = settings.level_labels()
    out = {}
    per_node: dict[str | None, dict[str, str | None]] = {}  # a node's labels, parsed once for its GPUs
    for gpu, node, model, numa, nvlink, labels_json in rows:
        named = per_node.get(labels_json)
        if named is None:
            labels = _labels(labels_json)
            named = per_node[labels_json] = {lvl: next((labels[k] for k in keys if labels.get(k)), None)
                                             for lvl, keys in level_labels.items()}
        out[gpu] = GpuPlace(gpu, node, model, place_keys(node, numa, nvlink, named))
    return out


_GANGS = """
    SELECT namespace, pod, arg_max(workload_kind, ts) AS gkind, arg_max(workload_name, ts) AS gname
    FROM f_pod_snapshots WHERE ts < $end AND list_contains($group_kinds, workload_kind) GROUP BY namespace, pod
"""
"""Pods the collector's pod inventory names as part of a LeaderWorkerSet / pod-group job the owner chain splits."""

_OWNER = ("coalesce(g.gkind, a.workload_kind, 'Pod') AS kind, coalesce(g.gname, a.workload_name, a.pod) AS wname",
          "LEFT JOIN gangs g ON g.namespace = a.namespace AND g.pod = a.pod")
_OWNER_NO_GANGS = ("coalesce(a.workload_kind, 'Pod') AS kind, coalesce(a.workload_name, a.pod) AS wname", "")

_WHOLE_GPU = "d.kind = 'gpu' AND coalesce(a.sharing_mode, d.sharing_mode, 'exclusive') = 'exclusive'"
"""An allocation row (``a``, joined to ``devices d``) that holds a whole GPU exclusively."""

MULTI_PODS = """
WITH gangs AS ({gangs}),
held AS (  -- what each pod held in the span: one row per distinct holding (from the claims: no row per sample)
    SELECT namespace, workload_kind, workload_name, pod, gpu_uuid, device_id, sharing_mode, sum(n) AS n
    FROM (SELECT *, {samples_in_span} AS n FROM f_allocation_claims WHERE {span_claims})
    WHERE n > 0
    GROUP BY ALL
),
owned AS MATERIALIZED (  -- each holding's owner, and whether it is a whole GPU held exclusively
    SELECT a.namespace, {owner}, a.pod, a.gpu_uuid, a.n, coalesce({whole_gpu}, false) AS whole
    FROM held a LEFT JOIN devices d ON d.device_id = a.device_id {join}
),
pods AS (  -- per owner and pod: did the pod hold 2+ whole GPUs in the span?
    SELECT namespace, kind, wname, pod, min(gpu_uuid) <> max(gpu_uuid) AS multi_gpu
    FROM owned
    WHERE whole
    GROUP BY ALL
),
multi AS (
    SELECT namespace, kind, wname, pod FROM pods
    QUALIFY bool_or(multi_gpu) OVER (PARTITION BY namespace, kind, wname) OR list_contains($gang_kinds, kind)
),
pure AS (  -- a pod whose every row is its owner's whole GPU: its rows need no owner or device per row
    SELECT namespace, pod, bool_and(whole) AND count(DISTINCT (kind, wname)) = 1 AS pure, sum(n) AS n
    FROM owned SEMI JOIN multi USING (namespace, pod)
    GROUP BY ALL
)
SELECT m.namespace, m.kind, m.wname, m.pod, coalesce(p.pure, false), coalesce(p.n, 0)
FROM multi m LEFT JOIN pure p ON p.namespace = m.namespace AND p.pod = m.pod  -- no namespace or pod name: not pure
"""
"""The pods of owners that can hold a multi-device placement (a gang kind, or one of its pods held 2+ whole
GPUs), whether each such pod is pure (every row of it in the span is a whole GPU its one owner held
exclusively), and its rows in the span. Grouping the span's rows per distinct holding first (no join or
owner expression per row) leaves the per-owner work to a few thousand rows."""

_ROWS_OF_PURE_PODS = """
    SELECT o.oid, a.ts, a.pod, a.tenant, a.gpu_uuid, a.gpu_equivalents
    FROM f_allocations a JOIN owners o ON o.namespace = a.namespace AND o.pod = a.pod
    WHERE a.ts >= $start AND a.ts < $end
"""
"""The multi-device owners' rows when all of their pods are pure (``MULTI_PODS``): a row's pod says its owner."""

_ROWS_BY_OWNER = """
    SELECT o.oid, r.ts, r.pod, r.tenant, r.gpu_uuid, r.gpu_equivalents
    FROM (
        SELECT a.namespace, {owner}, a.ts, a.pod, a.tenant, a.gpu_uuid, a.gpu_equivalents
        FROM f_allocations a JOIN devices d ON d.device_id = a.device_id {join}
        WHERE a.ts >= $start AND a.ts < $end AND (a.pod IN (SELECT pod FROM owners) OR a.pod IS NULL) AND {whole_gpu}
    ) r JOIN (SELECT DISTINCT oid, namespace, kind, wname FROM owners) o USING (namespace, kind, wname)
"""
"""The multi-device owners' rows in general (a pod that also held other devices, one that another owner's rows
also name, a row without a pod name): the owner and the device of each row; only the rows of their pods'
names (or none) are looked at."""

_OWNERS = """owners AS (SELECT unnest($oids) AS oid, unnest($ns) AS namespace, unnest($kinds) AS kind,
                         unnest($names) AS wname, unnest($pods) AS pod)"""

_PLACEMENTS = """
sets AS (  -- per owner and sample time: a placement's key
    SELECT oid, ts, any_value(tenant) AS tenant, sum(hash(pod, gpu_uuid)) AS sig_key, count(*) AS pairs,
           sum(gpu_equivalents) AS ge
    FROM {source}
    GROUP BY oid, ts
),
placements AS (
    SELECT oid, any_value(tenant) AS tenant, count(*) AS samples,
           sum(ge)::DOUBLE AS ge_samples,  -- as stored, also from Parquet facts holding a DECIMAL
           min(ts) AS first_ts, max(ts) AS last_ts
    FROM sets
    WHERE pairs >= 2
    GROUP BY oid, sig_key
)"""
"""Per multi-device owner (``MULTI_PODS``, numbered ``oid``) and distinct (pod, GPU) set of the span (keyed by a
sum of hashes): its tenant, samples, GE-samples, first and last time. A Deployment of 200 single-GPU pods
changes its set at every pod restart and is never a multi-device workload (:func:`is_multi_device`)."""

_PAIRS = "list_sort(list_distinct(list(r.pod || '|' || r.gpu_uuid)))"
"""The sorted (pod, GPU) list of rows ``r`` (grouped per owner and sample time)."""

SEEN_PLACEMENTS = """
WITH gangs AS ({gangs}), {owners},
rows AS MATERIALIZED ({rows}),
{placements},
firsts AS (  -- each placement's pairs at its first sample time
    SELECT r.oid, r.ts, {pairs} AS sig
    FROM rows r SEMI JOIN placements p ON p.oid = r.oid AND p.first_ts = r.ts
    GROUP BY r.oid, r.ts
)
SELECT p.oid, p.tenant, f.sig, p.samples, p.ge_samples, p.first_ts, p.last_ts
FROM placements p JOIN firsts f ON f.oid = p.oid AND f.ts = p.first_ts
"""
"""The placements and their pairs in one read, holding the multi-device owners' rows in memory."""

SEEN_KEYS = """
WITH gangs AS ({gangs}), {owners}, {placements}
SELECT oid, tenant, samples, ge_samples, first_ts, last_ts FROM placements
"""
"""The placements without their pairs, in one streaming read (with ``SEEN_PAIRS``: for many rows)."""

SEEN_PAIRS = """
WITH gangs AS ({gangs}), {owners},
wanted AS (SELECT unnest($first_oids) AS oid, unnest($first_times) AS ts)
SELECT r.oid, r.ts, {pairs} AS sig
FROM ({rows}) r SEMI JOIN wanted w ON w.oid = r.oid AND w.ts = r.ts
GROUP BY r.oid, r.ts
"""
"""The pairs of each placement at its first sample time (``wanted``), read again."""

HELD_ROWS = 2_000_000
"""Multi-device rows of a day part held in memory at most (about 50-150 bytes each, with the names' lengths):
above, the placements are keyed in a streaming read and their pairs read again at their first times."""


def seen(con: duckdb.DuckDBPyConnection, window: Window, gang_kinds: tuple[str, ...],
         held_rows: int = HELD_ROWS) -> list[tuple[object, ...]]:
    """A day part's placements: (namespace, kind, workload, tenant, sig, samples, GE-samples, first, last).

    Two passes over the span's allocation rows: one groups them per distinct holding (owner columns, pod,
    GPU, device, sharing mode) to find the pods of workloads that can be multi-device; the other reads only
    those workloads' rows (by namespace and pod when each of their pods is pure, see ``MULTI_PODS``; else
    with the owner and the device of each row, as the definition says), keys each workload's placement per
    sample time (a sum of hashes), and lists each placement's (pod, GPU) pairs at its first sample time
    (from those rows held in memory, or above ``held_rows`` of them read a third time at those times).
    Without pods of LeaderWorkerSet / pod-group jobs in the inventory, the owner is the allocation row's own.
    """
    p = {"start": window.start, "end": window.end, "group_kinds": sorted(GROUP_KINDS)}
    gangs = con.execute(f"SELECT EXISTS ({_GANGS})", {"end": window.end, "group_kinds": p["group_kinds"]}).fetchone()  # noqa: S608
    owner, join = _OWNER if gangs and gangs[0] else _OWNER_NO_GANGS
    sql = {"gangs": _GANGS, "owner": owner, "join": join, "whole_gpu": _WHOLE_GPU}
    pods = con.execute(MULTI_PODS.format(**sql, samples_in_span=SAMPLES_IN_SPAN, span_claims=SPAN_CLAIMS),
                       {**p, "gang_kinds": sorted(gang_kinds)}).fetchall()
    if not pods:
        return []
    oid: dict[tuple[object, ...], int] = {}
    for ns, kind, wname, *_ in pods:
        oid.setdefault((ns, kind, wname), len(oid))
    owners = list(oid)
    rows = (_ROWS_OF_PURE_PODS if all(pure for *_, pure, _ in pods) else _ROWS_BY_OWNER).format(**sql)
    params = {**p, "oids": [oid[(ns, kind, wname)] for ns, kind, wname, *_ in pods], "ns": [r[0] for r in pods],
              "kinds": [r[1] for r in pods], "names": [r[2] for r in pods], "pods": [r[3] for r in pods]}
    parts = {**sql, "owners": _OWNERS, "rows": rows, "pairs": _PAIRS}
    if sum(n for *_, n in pods) <= held_rows:
        found = con.execute(SEEN_PLACEMENTS.format(**parts, placements=_PLACEMENTS.format(source="rows")),
                            params).fetchall()
    else:
        keyed = con.execute(SEEN_KEYS.format(**parts, placements=_PLACEMENTS.format(source=f"({rows})")),
                            params).fetchall()
        wanted = {"first_oids": [k[0] for k in keyed], "first_times": [k[4] for k in keyed]}
        sigs = {(o, ts): sig for o, ts, sig in con.execute(SEEN_PAIRS.format(**parts), {**params, **wanted}).fetchall()}
        found = [(o, tenant, sigs[(o, first)], samples, ge, first, last) for o, tenant, samples, ge, first, last in keyed]
    return [(*owners[o], tenant, sig, samples, ge, first, last) for o, tenant, sig, samples, ge, first, last in found]


def insert_seen(con: duckdb.DuckDBPyConnection, part_id: str, window: Window, settings: TopologySettings) -> None:
    """Write the placements one day part saw to ``part_placements`` (the caller holds the transaction)."""
    rows = seen(con, window, settings.gang_kinds)
    if not rows:
        return
    names = ("namespace", "kind", "wname", "tenant", "sig", "samples", "ge_samples", "first_ts", "last_ts")
    cols: dict[str, list[object]] = {"part_id": [part_id] * len(rows)}
    cols.update({n: [r[i] for r in rows] for i, n in enumerate(names)})
    insert_columns(con, "part_placements", cols)


def observed(con: duckdb.DuckDBPyConnection, window: Window, interval: float) -> dict[tuple[str, str, str, str], list[Placement]]:
    """(tenant, namespace, kind, workload) -> its distinct placements, longest held first."""
    merged: dict[tuple[str, str, str, tuple[str, ...]], list] = {}
    for row, ns, kind, wname, tenant, joined, pairs, listed, samples, ge_samples, first, last in con.execute(
        """SELECT rowid, namespace, kind, wname, tenant, array_to_string(sig, chr(10)), len(sig), list_count(sig),
                  samples, ge_samples, first_ts, last_ts FROM an_placements"""
    ).fetchall():  # the window's day parts, merged below; the pairs come as one string (a list of strings costs 2x)
        if pairs < 2:
            continue  # a single (pod, GPU) pair listed twice at one time
        sig = tuple(joined.split("\n"))
        if len(sig) != pairs or listed != pairs:  # a pair holding a line break (or a NULL): read it as listed
            sig = tuple(con.execute("SELECT sig FROM an_placements WHERE rowid = ?", [row]).fetchall()[0][0])
        key = (ns, kind, wname, sig)
        if key in merged:  # the same set on another day (or with a duplicated row at some time): one placement
            m = merged[key]
            m[1], m[2], m[3], m[4] = m[1] + samples, m[2] + ge_samples, min(m[3], first), max(m[4], last)
        else:
            merged[key] = [tenant, samples, ge_samples, first, last]
    out: dict[tuple[str, str, str, str], list[Placement]] = defaultdict(list)
    keys: dict[tuple[str, str, str], str] = {}
    for (ns, kind, wname, sig), (tenant, samples, ge_samples, first, last) in sorted(
        merged.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], -kv[1][1], kv[0][3])
    ):
        tenant_key = keys.setdefault((ns, kind, wname), str(tenant))
        out[(tenant_key, ns, kind, wname)].append(
            Placement(sig, int(samples), float(ge_samples) * interval / 3600.0, first, last)
        )
    return out


def is_multi_device(kind: str, placement: Placement, settings: TopologySettings) -> bool:
    """A gang owner with 2+ GPUs in all, or any pod holding 2+ GPUs."""
    return len(placement.gpus) >= 2 and (kind in settings.gang_kinds or max(placement.pod_sizes) >= 2)


def assess(con: duckdb.DuckDBPyConnection, window: Window, interval: float,
           settings: TopologySettings) -> tuple[list[Finding], list[StrandedRow]]:
    """Placement findings per multi-device workload and level, and stranded-by-topology free GPUs."""
    places = fleet_places(con, settings)
    findings: list[Finding] = []
    shapes: dict[str, set[int]] = defaultdict(set)
    jobs: dict[str, set[int]] = defaultdict(set)
    fleets: dict[tuple[str, ...], FleetShapes] = {}
    for (tenant, ns, kind, wname), placements in observed(con, window, interval).items():
        main = placements[0]
        if not is_multi_device(kind, main, settings):
            continue
        gpus = list(main.gpus)
        held = [places[g] for g in gpus if g in places]
        if len(held) != len(gpus):
            continue  # a GPU the dimensions do not describe: no claim about this workload
        models = sorted({p.gpu_model for p in held})
        key = tuple(models)
        if key not in fleets:  # domain sizes of these models, worked out once for every workload on them
            fleets[key] = FleetShapes([p for p in places.values() if p.gpu_model in models])
        fleet = fleets[key]
        pod_sizes = list(main.pod_sizes)
        for model in models:
            shapes[model].update(pod_sizes)
            jobs[model].add(len(gpus))
        score = distance_score(held)
        affected = affected_hours([p.pairs for p in placements], [p.ge_hours for p in placements], places, fleet)
        total = sum(p.ge_hours for p in placements)
        for s in spread(held, pod_sizes, fleet):
            findings.append(Finding(
                tenant, ns, kind, wname, "+".join(models), len(main.pod_sizes), len(gpus), len({p.node for p in held}),
                s, score, total, affected.get(s.level, 0.0), len(placements),
                min(p.first_ts for p in placements), max(p.last_ts for p in placements),
            ))
    pending = con.execute(
        """
        SELECT DISTINCT coalesce(m.short, p.gpu_model, ''), p.quantity / greatest(p.workloads, 1)
        FROM f_pending_demand p LEFT JOIN an_models m ON m.alias = p.gpu_model
        WHERE p.ts >= $start AND p.ts < $end AND p.profile = 'gpu' AND p.quantity > 0
        """,
        {"start": window.start, "end": window.end},
    ).fetchall()
    for model, size in pending:
        if size and float(size).is_integer() and size >= 2:
            shapes[str(model)].add(int(size))
            jobs[str(model)].add(int(size))
    stranded = stranded_by_topology(con, window, places, shapes, jobs)
    return findings, stranded


def insert_placement(con: duckdb.DuckDBPyConnection, run_id: str, window: Window,
                     findings: list[Finding], stranded: list[StrandedRow]) -> None:
    """Append the rows of ``placement`` and ``topology_stranded`` for this run."""
    run = {"run_id": run_id, "window_start": window.start, "window_end": window.end}
    rows = [
        {**run, "tenant": f.tenant, "namespace": f.namespace, "workload_kind": f.workload_kind, "workload": f.workload,
         "gpu_model": f.gpu_model, "level": f.spread.level, "pods": f.pods, "devices": f.devices, "nodes": f.nodes,
         "domains_spanned": f.spread.domains_spanned, "min_domains": f.spread.min_domains,
         "excess_domains": f.spread.excess, "placed_worse": f.spread.excess > 0, "distance_score": f.distance_score,
         "ge_hours": f.ge_hours, "ge_hours_affected": f.ge_hours_affected, "placements": f.placements,
         "domains": list(f.spread.domains), "first_seen": f.first_ts, "last_seen": f.last_ts, "reason": f.reason}
        for f in findings
    ]
    _append(con, "placement", rows)
    _append(con, "topology_stranded", [{**run, **s.as_row()} for s in stranded])


def _append(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, object]]) -> None:
    names = column_names(table)
    append_columns(con, table, {n: [r[n] for r in rows] for n in names} if rows else {})
