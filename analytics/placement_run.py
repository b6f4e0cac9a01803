"""Placement findings of one window from the store: rows of ``placement`` and ``topology_stranded``.

Reads whole-GPU, exclusive allocations (MIG instances and shared replicas have no NVLink peers of
their own), groups them by owner (namespace, workload kind, workload name; where the pod inventory
names a LeaderWorkerSet or pod group, see ``exporter/tenancy/gangs.py``, that group), and, per distinct
placement (the set of pod/GPU pairs held at a sample time), measures every topology level with
:mod:`gpulens.analytics.placement`. A workload's row per level describes the placement it held
longest; ``ge_hours_affected`` adds up every placement of it that spanned more domains than needed
(:mod:`gpulens.analytics.placement_affected`, all of a workload's placements at once).

Stranded by topology is measured at the newest GPU sample of the window (``topology_stranded``).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

import duckdb

from gpulens.analytics.facts import Window
from gpulens.analytics.placement import FleetShapes, GpuPlace, LevelSpread, distance_score, place_keys, spread
from gpulens.analytics.placement_affected import affected_hours
from gpulens.analytics.result_tables import append_columns, column_names, insert_columns
from gpulens.analytics.topology_settings import TopologySettings
from gpulens.analytics.topology_stranded import StrandedRow, stranded_by_topology
from gpulens.exporter.tenancy.gangs import GROUP_KINDS


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

_EXCLUSIVE_GPU = """
    a.ts >= $start AND a.ts < $end AND d.kind = 'gpu'
    AND coalesce(a.sharing_mode, d.sharing_mode, 'exclusive') = 'exclusive'
"""
"""Allocation rows of the span that hold a whole GPU exclusively (joined to ``devices d``)."""

MULTI_OWNERS = """
WITH gangs AS ({gangs})
SELECT namespace, kind, wname FROM (  -- per owner and pod: does the pod hold 2+ GPUs at some time of the span?
    SELECT a.namespace, {owner}, a.pod, min(a.gpu_uuid) <> max(a.gpu_uuid) AS multi_gpu
    FROM f_allocations a JOIN devices d ON d.device_id = a.device_id {join}
    WHERE {exclusive}
    GROUP BY ALL
)
GROUP BY ALL HAVING bool_or(multi_gpu) OR list_contains($gang_kinds, kind)
"""
"""Owners that can hold a multi-device placement: a gang kind, or one of its pods held 2+ GPUs. A grouping
per owner and pod has few groups, so finding them first leaves the grouping per owner and sample time to
their rows alone (a fleet of single-GPU pods has 40 such owners of 40,000 in a day)."""

SEEN_GROUPS = """
WITH gangs AS ({gangs}),
multi AS (SELECT unnest($ns) AS namespace, unnest($kinds) AS kind, unnest($names) AS wname),
sets AS (  -- per owner and sample time: a placement's key
    SELECT namespace, kind, wname, ts, any_value(tenant) AS tenant, sum(hash(pod, gpu_uuid)) AS sig_key,
           count(*) AS pairs, sum(gpu_equivalents) AS ge
    FROM (
        SELECT a.namespace, {owner}, a.ts, a.pod, a.tenant, a.gpu_uuid, a.gpu_equivalents
        FROM f_allocations a JOIN devices d ON d.device_id = a.device_id {join}
        WHERE {exclusive}
    ) SEMI JOIN multi USING (namespace, kind, wname)
    GROUP BY namespace, kind, wname, ts
)
SELECT namespace, kind, wname, any_value(tenant) AS tenant, count(*) AS samples,
       sum(ge)::DOUBLE AS ge_samples,  -- as stored, also from Parquet facts holding a DECIMAL
       min(ts) AS first_ts, max(ts) AS last_ts
FROM sets
WHERE pairs >= 2
GROUP BY namespace, kind, wname, sig_key
"""
"""Per multi-device owner (``MULTI_OWNERS``) and distinct (pod, GPU) set of the span: its samples, GE-samples,
first and last time. A Deployment of 200 single-GPU pods changes its set at every pod restart and is never a
multi-device workload (:func:`is_multi_device`)."""

SEEN_PAIRS = """
WITH gangs AS ({gangs}),
wanted AS (SELECT unnest($ns) AS namespace, unnest($kinds) AS kind, unnest($names) AS wname, unnest($firsts) AS ts),
rows AS (
    SELECT a.namespace, {owner}, a.ts, a.pod, a.gpu_uuid
    FROM f_allocations a JOIN devices d ON d.device_id = a.device_id {join}
    WHERE {exclusive} AND a.ts IN (SELECT unnest($times))  -- on ts alone (a hash lookup): before the other columns
)
SELECT r.namespace, r.kind, r.wname, r.ts, list_sort(list_distinct(list(r.pod || '|' || r.gpu_uuid))) AS sig
FROM rows r SEMI JOIN wanted w ON w.namespace = r.namespace AND w.kind = r.kind AND w.wname = r.wname AND w.ts = r.ts
GROUP BY ALL
"""
"""The sorted (pod, GPU) list of each workload at the given sample times (each of its placements' first)."""


def seen(con: duckdb.DuckDBPyConnection, window: Window, gang_kinds: tuple[str, ...]) -> list[tuple[object, ...]]:
    """A day part's placements: (namespace, kind, workload, tenant, sig, samples, GE-samples, first, last).

    Three passes over the span's allocation rows: one aggregation per workload and pod finds the
    workloads that can be multi-device, one per such workload and sample time finds their distinct
    placements (keyed by a sum of hashes), then only the rows of each placement's workload at its first
    sample time are read again to list its (pod, GPU) pairs. Without pods of
    LeaderWorkerSet / pod-group jobs in the inventory, the owner is the allocation row's own (no join
    per row).
    """
    p = {"start": window.start, "end": window.end, "group_kinds": sorted(GROUP_KINDS)}
    gangs = con.execute(f"SELECT EXISTS ({_GANGS})", {"end": window.end, "group_kinds": p["group_kinds"]}).fetchone()  # noqa: S608
    owner, join = _OWNER if gangs and gangs[0] else _OWNER_NO_GANGS
    sql = {"gangs": _GANGS, "owner": owner, "join": join, "exclusive": _EXCLUSIVE_GPU}
    owners = con.execute(MULTI_OWNERS.format(**sql), {**p, "gang_kinds": sorted(gang_kinds)}).fetchall()
    if not owners:
        return []
    multi = {"ns": [o[0] for o in owners], "kinds": [o[1] for o in owners], "names": [o[2] for o in owners]}
    groups = con.execute(SEEN_GROUPS.format(**sql), {**p, **multi}).fetchall()
    if not groups:
        return []
    wanted = {"ns": [g[0] for g in groups], "kinds": [g[1] for g in groups], "names": [g[2] for g in groups],
              "firsts": [g[6] for g in groups], "times": sorted({g[6] for g in groups})}
    pairs = {(ns, kind, wname, ts): sig for ns, kind, wname, ts, sig in
             con.execute(SEEN_PAIRS.format(**sql), {**p, **wanted}).fetchall()}
    return [(ns, kind, wname, tenant, pairs[(ns, kind, wname, first)], samples, ge, first, last)
            for ns, kind, wname, tenant, samples, ge, first, last in groups]


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
