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

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb
import polars as pl

from analytics.facts import Window
from analytics.placement.spread import LEVELS, GpuPlace

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
fresh AS (SELECT gpu_uuid, max(ts) AS ts FROM recent GROUP BY gpu_uuid),
states AS (
    SELECT fr.gpu_uuid, fr.ts, coalesce(s.up, true) AS up, n.ts AS newest
    FROM fresh fr JOIN recent s ON s.gpu_uuid = fr.gpu_uuid AND s.ts = fr.ts, newest n
),
held AS (  -- a claim that samples the GPU's newest time (claims never run over a UTC midnight)
    SELECT DISTINCT s.gpu_uuid FROM states s JOIN f_allocation_claims a ON a.gpu_uuid = s.gpu_uuid
    WHERE a.ts >= CAST(CAST($lo AS DATE) AS TIMESTAMP) AND a.ts < $end AND a.last_ts >= $lo
      AND a.ts <= s.ts AND s.ts <= a.last_ts AND (a.step_us = 0 OR (epoch_us(s.ts) - epoch_us(a.ts)) % a.step_us = 0)
)
SELECT s.gpu_uuid, s.ts, s.up AND h.gpu_uuid IS NULL AS free, s.newest FROM states s LEFT JOIN held h USING (gpu_uuid)
"""

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

    The window's last hour is read once (the fleet's newest, every GPU's newest before it and whether a claim
    holds it then) when they lie in it; otherwise the newest is looked for with :func:`fleet_newest` and the GPUs read after it."""
    lo = max(window.start, window.end - timedelta(seconds=TAIL_SECONDS))
    rows = con.execute(_TAIL, {"lo": lo, "end": window.end, "fresh": FRESH_SECONDS}).fetchall()
    if rows and rows[0][3] - timedelta(seconds=FRESH_SECONDS) >= lo:
        return [(gpu, ts, bool(free)) for gpu, ts, free, _ in rows]
    newest = fleet_newest(con, window)
    if newest is None:
        return []
    return [(gpu, ts, bool(free)) for gpu, ts, free in
            con.execute(_FREE, {"newest": newest, "fresh": FRESH_SECONDS}).fetchall()]


def _parent_levels(level: str) -> tuple[int, ...]:
    """Where the parent domain of a ``level`` domain is read from a GPU's chain: the first of these with a key."""
    parent = PARENT[level]
    return tuple(LEVELS.index(candidate) for candidate in ((parent,) if isinstance(parent, str) else parent))


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
        table = _domain_table(fleets[model], free)
        for level in (*POD_LEVELS, *JOB_LEVELS):
            shapes = sorted(pod_shapes.get(model, set()) if level in POD_LEVELS else job_shapes.get(model, set()))
            rows.extend(_level_rows(at, model, level, table, shapes))
    return rows


def _domain_table(fleet: list[GpuPlace], free: Mapping[str, bool]) -> pl.DataFrame:
    """One row per GPU of a model's fleet, in its order: free or not, its key at every level and, per level of
    ``PARENT``, its parent domain there."""
    chains = [p.chain for p in fleet]
    columns: dict[str, object] = {"free": [bool(free.get(p.gpu_uuid)) for p in fleet]}
    for i, level in enumerate(LEVELS):
        columns[level] = [c[i] for c in chains]
    table = pl.DataFrame(columns, schema={"free": pl.Boolean, **{level: pl.Utf8 for level in LEVELS}})
    return table.with_columns(**{f"parent_{level}": pl.coalesce([pl.col(LEVELS[i]) for i in _parent_levels(level)])
                                 for level in PARENT})


def _level_rows(at: datetime, model: str, level: str, table: pl.DataFrame, shapes: list[int]) -> list[StrandedRow]:
    held = table.filter(pl.col(level).is_not_null())
    per_domain = held.group_by(level).agg(  # each domain's parent is its last GPU's, in the fleet's order
        pl.len().alias("size"), pl.col("free").sum().alias("free_in"), pl.col(f"parent_{level}").last().alias("parent"))
    parent_free_rows = held.filter(pl.col("free")).group_by(f"parent_{level}").len()  # free GPUs by their own parent
    parent_free: dict[str | None, int] = dict(zip(parent_free_rows[f"parent_{level}"].to_list(),
                                                  parent_free_rows["len"].to_list(), strict=True))
    size = dict(zip(per_domain[level].to_list(), per_domain["size"].to_list(), strict=True))
    free_in = {k: v for k, v in zip(per_domain[level].to_list(), per_domain["free_in"].to_list(), strict=True) if v}
    parent_of = dict(zip(per_domain[level].to_list(), per_domain["parent"].to_list(), strict=True))
    if not size:
        return []
    fitting = [s for s in shapes if 2 <= s <= max(size.values())]
    rows = []
    for domain in sorted(free_in):
        f, parent = free_in[domain], parent_of[domain]
        pf = parent_free.get(parent, 0) if parent is not None else f
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
