"""Placement findings of one window from the store: rows of ``placement`` and ``topology_stranded``.

Reads whole-GPU, exclusive allocations (MIG instances and shared replicas have no NVLink peers of
their own), groups them by owner (namespace, workload kind, workload name; where the pod inventory
names a LeaderWorkerSet or pod group, see ``exporter/tenancy/gangs.py``, that group), and, per distinct
placement (the set of pod/GPU pairs held at a sample time), measures every topology level with
:mod:`gpulens.analytics.placement`. A workload's row per level describes the placement it held
longest; ``ge_hours_affected`` adds up every placement of it that spanned more domains than needed.

Stranded by topology is measured at the newest GPU sample of the window (``topology_stranded``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

import duckdb

from gpulens.analytics.facts import Window
from gpulens.analytics.placement import FleetShapes, GpuPlace, LevelSpread, distance_score, place_keys, spread
from gpulens.analytics.result_tables import append_columns, column_names
from gpulens.analytics.topology_settings import TopologySettings
from gpulens.analytics.topology_stranded import StrandedRow, stranded_by_topology
from gpulens.exporter.tenancy.gangs import GROUP_KINDS


@dataclass(frozen=True)
class Placement:
    """One distinct placement of one workload: pod -> GPUs, how long and how much it was held."""

    pods: dict[str, tuple[str, ...]]
    samples: int
    ge_hours: float
    first_ts: datetime
    last_ts: datetime


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
    for gpu, node, model, numa, nvlink, labels_json in rows:
        labels = _labels(labels_json)
        named = {lvl: next((labels[k] for k in keys if labels.get(k)), None) for lvl, keys in level_labels.items()}
        out[gpu] = GpuPlace(gpu, node, model, place_keys(node, numa, nvlink, named))
    return out


SEEN_SELECT = """
WITH gangs AS (  -- the collector's pod inventory names LeaderWorkerSet / pod-group jobs the owner chain splits
    SELECT namespace, pod, arg_max(workload_kind, ts) AS gkind, arg_max(workload_name, ts) AS gname
    FROM f_pod_snapshots WHERE ts < $end AND list_contains($group_kinds, workload_kind) GROUP BY namespace, pod
),
a AS (
    SELECT a.ts, a.namespace, coalesce(g.gkind, a.workload_kind, 'Pod') AS kind,
           coalesce(g.gname, a.workload_name, a.pod) AS wname,
           a.tenant, a.pod, a.gpu_uuid, a.gpu_equivalents AS ge
    FROM f_allocations a JOIN devices d ON d.device_id = a.device_id
    LEFT JOIN gangs g ON g.namespace = a.namespace AND g.pod = a.pod
    WHERE a.ts >= $start AND a.ts < $end AND d.kind = 'gpu'
      AND coalesce(a.sharing_mode, d.sharing_mode, 'exclusive') = 'exclusive'
),
multi AS (  -- owners that can hold a multi-device placement: a gang kind, or a pod with 2+ GPUs
    SELECT namespace, kind, wname FROM (
        SELECT namespace, kind, wname, pod, min(gpu_uuid) <> max(gpu_uuid) AS multi_gpu_pod
        FROM a GROUP BY ALL
    )
    GROUP BY ALL HAVING bool_or(multi_gpu_pod) OR list_contains($gang_kinds, kind)
),
per_ts AS (  -- a placement's key: the sum of its (pod, GPU) hashes (no list built per sample time)
    SELECT namespace, kind, wname, ts, any_value(tenant) AS tenant, sum(hash(pod, gpu_uuid)) AS sig_key,
           count(*) AS pairs, sum(ge) AS ge
    FROM a SEMI JOIN multi USING (namespace, kind, wname)
    GROUP BY namespace, kind, wname, ts
),
groups AS (
    SELECT namespace, kind, wname, any_value(tenant) AS tenant, sig_key, count(*) AS samples, sum(ge) AS ge_samples,
           min(ts) AS first_ts, max(ts) AS last_ts
    FROM per_ts WHERE pairs >= 2
    GROUP BY namespace, kind, wname, sig_key
)
SELECT $part_id, g.namespace, g.kind, g.wname, g.tenant,  -- the (pod, GPU) list, at one sample time of each
       list_sort(list_distinct(list(a.pod || '|' || a.gpu_uuid))) AS sig, g.samples, g.ge_samples, g.first_ts, g.last_ts
FROM groups g JOIN a ON a.namespace = g.namespace AND a.kind = g.kind AND a.wname = g.wname AND a.ts = g.first_ts
GROUP BY ALL
"""
"""A day part's placements (``part_placements``): per workload and distinct (pod, GPU) set, its samples,
GE-samples, first and last time in the span. Only owners that can be multi-device (a gang kind of the
topology settings, or a pod holding 2+ GPUs) are listed: a Deployment of 200 single-GPU pods changes its
set at every pod restart and is never a multi-device workload (:func:`is_multi_device`)."""


def insert_seen(con: duckdb.DuckDBPyConnection, part_id: str, window: Window, settings: TopologySettings) -> None:
    """Write the placements one day part saw (the caller holds the transaction)."""
    con.execute("INSERT INTO part_placements " + SEEN_SELECT, {
        "part_id": part_id, "start": window.start, "end": window.end, "group_kinds": sorted(GROUP_KINDS),
        "gang_kinds": sorted(settings.gang_kinds),
    })


def observed(con: duckdb.DuckDBPyConnection, window: Window, interval: float) -> dict[tuple[str, str, str, str], list[Placement]]:
    """(tenant, namespace, kind, workload) -> its distinct placements, longest held first."""
    merged: dict[tuple[str, str, str, tuple[str, ...]], list] = {}
    for ns, kind, wname, tenant, sig, samples, ge_samples, first, last in con.execute(
        "SELECT namespace, kind, wname, tenant, sig, samples, ge_samples, first_ts, last_ts FROM an_placements"
    ).fetchall():  # the window's day parts, merged below
        key = (ns, kind, wname, tuple(sig))
        if len(sig) < 2:
            continue  # a single (pod, GPU) pair listed twice at one time
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
        pods: dict[str, list[str]] = defaultdict(list)
        for item in sig:
            pod, _, gpu = str(item).rpartition("|")
            pods[pod].append(gpu)
        tenant_key = keys.setdefault((ns, kind, wname), str(tenant))
        out[(tenant_key, ns, kind, wname)].append(
            Placement({p: tuple(g) for p, g in pods.items()}, int(samples), float(ge_samples) * interval / 3600.0,
                      first, last)
        )
    return out


def is_multi_device(kind: str, placement: Placement, settings: TopologySettings) -> bool:
    """A gang owner with 2+ GPUs in all, or any pod holding 2+ GPUs."""
    devices = sum(len(g) for g in placement.pods.values())
    return devices >= 2 and (kind in settings.gang_kinds or max(len(g) for g in placement.pods.values()) >= 2)


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
        gpus = [g for gs in main.pods.values() for g in gs]
        held = [places[g] for g in gpus if g in places]
        if len(held) != len(gpus):
            continue  # a GPU the dimensions do not describe: no claim about this workload
        models = sorted({p.gpu_model for p in held})
        key = tuple(models)
        if key not in fleets:  # domain sizes of these models, worked out once for every workload on them
            fleets[key] = FleetShapes([p for p in places.values() if p.gpu_model in models])
        fleet = fleets[key]
        pod_sizes = [len(g) for g in main.pods.values()]
        for model in models:
            shapes[model].update(pod_sizes)
            jobs[model].add(len(gpus))
        score = distance_score(held)
        affected: dict[str, float] = defaultdict(float)
        for other in placements:
            other_gpus = [places.get(g) for gs in other.pods.values() for g in gs]
            if any(p is None for p in other_gpus):
                continue
            for s in spread([p for p in other_gpus if p is not None], [len(g) for g in other.pods.values()], fleet):
                if s.excess > 0:
                    affected[s.level] += other.ge_hours
        total = sum(p.ge_hours for p in placements)
        for s in spread(held, pod_sizes, fleet):
            findings.append(Finding(
                tenant, ns, kind, wname, "+".join(models), len(main.pods), len(gpus), len({p.node for p in held}),
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
