"""Placement findings of one window from the store: rows of ``placement`` and ``topology_stranded``.

Reads the placements of the window's multi-device workloads (whole GPUs held exclusively, MIG instances
and shared replicas have no NVLink peers of their own; owners as :mod:`analytics.placement.seen` names
them: namespace, workload kind, workload name, or the LeaderWorkerSet / pod group the pod inventory puts
a pod in, see ``gpulens/core/tenancy/gangs.py``), each distinct placement (the set of pod/GPU pairs held
at a sample time) rebuilt by :mod:`analytics.placement.held_pairs`, and measures every topology level
with :mod:`analytics.placement.spread`. A workload's row per level describes the placement it held
longest (the earliest of those held as long); ``ge_hours_affected`` adds up every placement of it that
spanned more domains than needed (:mod:`analytics.placement.affected`).

Stranded by topology is measured at the newest GPU sample of the window (``topology_stranded``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import duckdb

from analytics.facts import Window
from analytics.placement.affected import affected_hours
from analytics.placement.fleet import fleet_places
from analytics.placement.held_pairs import first_pairs, workloads_seen
from analytics.placement.settings import TopologySettings
from analytics.placement.spread import FleetShapes, LevelSpread, distance_score, spread
from analytics.placement.stranded import StrandedRow, stranded_by_topology
from analytics.result_tables import append_columns, column_names


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


def is_multi_device(kind: str, gpus: Sequence[str], pod_sizes: Sequence[int], settings: TopologySettings) -> bool:
    """A gang owner with 2+ GPUs in all, or any pod holding 2+ GPUs."""
    return len(gpus) >= 2 and (kind in settings.gang_kinds or max(pod_sizes) >= 2)


def assess(con: duckdb.DuckDBPyConnection, window: Window, interval: float,
           settings: TopologySettings) -> tuple[list[Finding], list[StrandedRow]]:
    """Placement findings per multi-device workload and level, and stranded-by-topology free GPUs."""
    places = fleet_places(con, settings)
    findings: list[Finding] = []
    shapes: dict[str, set[int]] = defaultdict(set)
    jobs: dict[str, set[int]] = defaultdict(set)
    fleets: dict[tuple[str, ...], FleetShapes] = {}
    multi = [(w, gpus, pod_sizes) for w in workloads_seen(con, places)
             for gpus, pod_sizes in [first_pairs(w.main_pairs)] if is_multi_device(w.kind, gpus, pod_sizes, settings)]
    known = places.places_of(g for _, gpus, _ in multi for g in gpus)
    for w, gpus, pod_sizes in multi:
        held = [known[g] for g in gpus if g in known]
        if len(held) != len(gpus):
            continue  # a GPU the dimensions do not describe: no claim about this workload
        models = sorted({p.gpu_model for p in held})
        key = tuple(models)
        if key not in fleets:  # domain sizes of these models, worked out once for every workload on them
            fleets[key] = FleetShapes(places.of_models(models).frame)
        fleet = fleets[key]
        for model in models:
            shapes[model].update(pod_sizes)
            jobs[model].add(len(gpus))
        score = distance_score(held)
        hours = [p.ge_samples * interval / 3600.0 for p in w.placements]
        affected = affected_hours([p.held for p in w.placements], hours, fleet)
        total = sum(hours)
        for s in spread(held, list(pod_sizes), fleet):
            findings.append(Finding(
                w.tenant, w.namespace, w.kind, w.workload, "+".join(models), len(pod_sizes), len(gpus),
                len({p.node for p in held}), s, score, total, affected.get(s.level, 0.0), len(w.placements),
                min(p.first_ts for p in w.placements), max(p.last_ts for p in w.placements),
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
    stranded = stranded_by_topology(con, places, shapes, jobs)
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
