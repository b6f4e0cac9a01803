"""Free GPUs stranded by topology: free inside a domain too small for any common shape, though its parent has room.

Measured at each GPU's newest sample of the window (GPUs silent for more than ``FRESH_SECONDS``
before the newest sample of the fleet are not counted as free: unknown is not free). A GPU is free
when it is up and nobody holds it at that sample. Shapes per GPU model: the pod sizes (GPUs per pod)
and job sizes (GPUs per workload) of the multi-device workloads seen in the window, plus pending
whole-GPU requests. For each level, the unit a domain must hold whole is a pod at nvlink / numa /
node, a job at rack / block. A domain's free GPUs are **stranded by topology** when no shape fits in
them, while some shape that fits in one domain of this level would fit in the parent's free GPUs: the
capacity is there, split across domains.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb

from analytics.facts import Window
from analytics.placement.spread import GpuPlace

FRESH_SECONDS = 600
PARENT = {"nvlink": "node", "numa": "node", "node": ("rack", "block", "zone"), "rack": "block", "block": "zone"}
POD_LEVELS = ("nvlink", "numa", "node")
JOB_LEVELS = ("rack", "block")


@dataclass(frozen=True)
class StrandedRow:
    at: datetime
    level: str
    domain: str
    parent: str | None
    gpu_model: str
    free_gpus: int
    stranded_gpus: int
    parent_free_gpus: int
    smallest_shape_gpus: int | None
    reason: str

    def as_row(self) -> dict[str, object]:
        return {
            "measured_at": self.at, "level": self.level, "domain": self.domain, "parent": self.parent,
            "gpu_model": self.gpu_model, "free_gpus": self.free_gpus, "stranded_gpus": self.stranded_gpus,
            "parent_free_gpus": self.parent_free_gpus, "smallest_shape_gpus": self.smallest_shape_gpus,
            "reason": self.reason,
        }


_NEWEST = "SELECT max(ts) FROM f_gpu_samples WHERE ts >= $start AND ts < $end"

TAIL_SECONDS = 3600
"""The window's last hour: read once for the fleet's newest sample and each GPU's newest before it, when they lie in it."""

_TAIL = """
WITH tail AS (SELECT gpu_uuid, ts, up FROM f_gpu_samples WHERE ts >= $lo AND ts < $end),
newest AS (SELECT max(ts) AS ts FROM tail),
recent AS (  -- as in _FREE, from the tail; complete only when the newest minus $fresh is inside the tail
    SELECT t.gpu_uuid, t.ts, t.up FROM tail t, newest n WHERE t.ts >= n.ts - to_seconds($fresh) AND t.ts <= n.ts
),
fresh AS (SELECT gpu_uuid, max(ts) AS ts FROM recent GROUP BY gpu_uuid)
SELECT fr.gpu_uuid, fr.ts, coalesce(s.up, true) AS up, n.ts AS newest
FROM fresh fr JOIN recent s ON s.gpu_uuid = fr.gpu_uuid AND s.ts = fr.ts, newest n
"""

_HELD = """
SELECT DISTINCT a.gpu_uuid, a.ts FROM f_allocations a
SEMI JOIN (SELECT unnest($gpus) AS gpu_uuid, unnest($times) AS ts) f ON f.gpu_uuid = a.gpu_uuid AND f.ts = a.ts
WHERE a.ts >= $oldest AND a.ts <= $newest
"""
"""Which of the GPUs are held at the given times (each GPU's newest sample)."""

_FREE = """
WITH recent AS (  -- only samples within $fresh of the fleet's newest can be a GPU's counted newest sample
    SELECT gpu_uuid, ts, up FROM f_gpu_samples WHERE ts >= $newest - to_seconds($fresh) AND ts <= $newest
),
fresh AS (SELECT gpu_uuid, max(ts) AS ts FROM recent GROUP BY gpu_uuid),
held AS (
    SELECT DISTINCT gpu_uuid, ts FROM f_allocations WHERE ts >= $newest - to_seconds($fresh) AND ts <= $newest
)
SELECT fr.gpu_uuid, fr.ts, coalesce(s.up, true) AND h.gpu_uuid IS NULL AS free
FROM fresh fr JOIN recent s ON s.gpu_uuid = fr.gpu_uuid AND s.ts = fr.ts
LEFT JOIN held h ON h.gpu_uuid = fr.gpu_uuid AND h.ts = fr.ts
"""


def fleet_newest(con: duckdb.DuckDBPyConnection, window: Window) -> datetime | None:
    """The newest GPU sample of the window: looked for in its last day first (the bounds are constants,
    so only the files and row groups of that day are read), the whole window only if that day has none."""
    last_day = max(window.start, window.end - timedelta(days=1))
    for start in (last_day, window.start):
        row = con.execute(_NEWEST, {"start": start, "end": window.end}).fetchone()
        if row and row[0] is not None:
            return row[0]  # type: ignore[no-any-return]
        if start == window.start:
            break
    return None


def newest_states(con: duckdb.DuckDBPyConnection, window: Window) -> list[tuple[str, datetime, bool]]:
    """(GPU, its newest sample, free there) for every GPU sampled within ``FRESH_SECONDS`` of the fleet's newest.

    The window's last hour is read once (the fleet's newest and every GPU's newest before it) when they lie in
    it; otherwise the newest is looked for with :func:`fleet_newest` and the GPUs read after it."""
    lo = max(window.start, window.end - timedelta(seconds=TAIL_SECONDS))
    rows = con.execute(_TAIL, {"lo": lo, "end": window.end, "fresh": FRESH_SECONDS}).fetchall()
    if rows and rows[0][3] - timedelta(seconds=FRESH_SECONDS) >= lo:
        newest = rows[0][3]
        times = {gpu: ts for gpu, ts, _, _ in rows}
        held = set(con.execute(_HELD, {
            "gpus": list(times), "times": list(times.values()), "oldest": min(times.values()), "newest": newest,
        }).fetchall())
        return [(gpu, ts, bool(up) and (gpu, ts) not in held) for gpu, ts, up, _ in rows]
    newest = fleet_newest(con, window)
    if newest is None:
        return []
    return [(gpu, ts, bool(free)) for gpu, ts, free in
            con.execute(_FREE, {"newest": newest, "fresh": FRESH_SECONDS}).fetchall()]


def _parent(place: GpuPlace, level: str) -> str | None:
    parent = PARENT[level]
    for candidate in (parent,) if isinstance(parent, str) else parent:
        key = place.key(candidate)
        if key is not None:
            return key
    return None


def stranded_by_topology(
    con: duckdb.DuckDBPyConnection, window: Window, places: Mapping[str, GpuPlace],
    pod_shapes: Mapping[str, set[int]], job_shapes: Mapping[str, set[int]],
) -> list[StrandedRow]:
    """One row per (level, domain) with free GPUs, for models that have multi-GPU shapes."""
    free: dict[str, bool] = {}
    at: datetime | None = None
    for gpu, ts, is_free in newest_states(con, window):
        if gpu in places:
            free[gpu] = is_free
            at = ts if at is None or ts > at else at
    if at is None:
        return []
    models = sorted(set(pod_shapes) | set(job_shapes))
    fleets: dict[str, list[GpuPlace]] = {model: [] for model in models}
    for p in places.values():  # each model's GPUs, in the fleet's order
        fleet = fleets.get(p.gpu_model)
        if fleet is not None:
            fleet.append(p)
    rows: list[StrandedRow] = []
    for model in models:
        for level in (*POD_LEVELS, *JOB_LEVELS):
            shapes = sorted(pod_shapes.get(model, set()) if level in POD_LEVELS else job_shapes.get(model, set()))
            rows.extend(_level_rows(at, model, level, fleets[model], free, shapes))
    return rows


def _level_rows(at: datetime, model: str, level: str, fleet: list[GpuPlace], free: Mapping[str, bool],
                shapes: list[int]) -> list[StrandedRow]:
    size: dict[str, int] = defaultdict(int)
    free_in: dict[str, int] = defaultdict(int)
    parent_of: dict[str, str | None] = {}
    parent_free: dict[str | None, int] = defaultdict(int)
    for p in fleet:
        key = p.key(level)
        if key is None:
            continue
        size[key] += 1
        parent_of[key] = _parent(p, level)
        if free.get(p.gpu_uuid):
            free_in[key] += 1
            parent_free[parent_of[key]] += 1
    if not size:
        return []
    fitting = [s for s in shapes if 2 <= s <= max(size.values())]
    rows = []
    for domain in sorted(free_in):
        f, parent = free_in[domain], parent_of[domain]
        pf = parent_free[parent] if parent is not None else f
        fits_here = [s for s in fitting if s <= f]
        fits_parent = [s for s in fitting if s <= pf]
        stranded = not fits_here and bool(fits_parent) and parent is not None
        unit = "pod" if level in POD_LEVELS else "job"
        if stranded:
            reason = (f"{f} free GPU(s) here, too few for the smallest {unit} of {fits_parent[0]} GPUs, while "
                      f"{parent} has {pf} free: split across {level} domains")
        elif fits_here:
            reason = f"a {unit} of {fits_here[-1]} GPUs fits in its {f} free GPU(s)"
        elif not fitting:
            reason = f"no multi-GPU {unit} shape of {model} fits in one {level} domain"
        else:
            reason = f"{f} free GPU(s); the parent's {pf} free are too few for any {unit} shape either"
        rows.append(StrandedRow(at, level, domain, parent, model, f, f if stranded else 0, pf,
                                fits_parent[0] if fits_parent else None, reason))
    return rows
