"""Free GPUs stranded by topology: free inside a domain too small for any common shape, though its parent has room.

Measured at each GPU's newest sample of the window (GPUs silent for more than ``FRESH_SECONDS``
before the newest sample of the fleet are not counted as free: unknown is not free), which each day part
stores per GPU (``part_gpu_last``: its last sample in the span, up or not, held or not), so the window
reads no GPU sample. A GPU is free
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
from datetime import datetime

import duckdb
import polars as pl

from analytics.facts import Window
from analytics.placement.fleet import as_fleet
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


PART_LAST = """
INSERT INTO part_gpu_last
SELECT $part_id, g.gpu_uuid, g.last_ts, g.up_at_last, h.gpu_uuid IS NOT NULL
FROM an_gpu_day g LEFT JOIN (  -- a claim that samples the GPU's last time (claims never run over a UTC midnight)
    SELECT DISTINCT g.gpu_uuid FROM an_gpu_day g JOIN f_allocation_claims a ON a.gpu_uuid = g.gpu_uuid
    WHERE a.ts >= CAST(CAST($start AS DATE) AS TIMESTAMP) AND a.ts < $end
      AND a.ts <= g.last_ts AND g.last_ts <= a.last_ts
      AND (a.step_us = 0 OR (epoch_us(g.last_ts) - epoch_us(a.ts)) % a.step_us = 0)
) h USING (gpu_uuid)
"""


def insert_part_last(con: duckdb.DuckDBPyConnection, part_id: str, window: Window) -> None:
    """Write a day part's ``part_gpu_last``: per GPU with samples in the span ``window`` (``an_gpu_day``), its last
    sample, up there or not, held there or not. The window's newest state of a GPU is that of its latest part."""
    con.execute(PART_LAST, {"part_id": part_id, "start": window.start, "end": window.end})


LAST_OF_WINDOW = """
CREATE OR REPLACE TEMP TABLE an_gpu_last AS
SELECT gpu_uuid, max(ts) AS ts, arg_max(up AND NOT held, ts) AS free
FROM part_gpu_last WHERE list_contains($ids, part_id) GROUP BY gpu_uuid
"""
"""Per GPU, its newest sample of the window and whether it was free there, from the window's day parts (``ids``)."""


def newest_states(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """(GPU, its newest sample, free there) for every GPU sampled within ``FRESH_SECONDS`` of the fleet's newest
    sample of the window (``an_gpu_last``). A GPU fresh then has its newest sample in its latest day part: a
    later part where it was sampled would hold a newer one."""
    return con.sql(
        "SELECT gpu_uuid, ts, coalesce(free, false) AS free FROM an_gpu_last "
        "WHERE ts >= (SELECT max(ts) FROM an_gpu_last) - to_seconds($fresh)",
        params={"fresh": FRESH_SECONDS},
    ).pl()


def _parent_levels(level: str) -> tuple[int, ...]:
    """Where the parent domain of a ``level`` domain is read from a GPU's chain: the first of these with a key."""
    parent = PARENT[level]
    return tuple(LEVELS.index(candidate) for candidate in ((parent,) if isinstance(parent, str) else parent))


def stranded_by_topology(
    con: duckdb.DuckDBPyConnection, places: Mapping[str, GpuPlace],
    pod_shapes: Mapping[str, set[int]], job_shapes: Mapping[str, set[int]],
) -> list[StrandedRow]:
    """One row per (level, domain) with free GPUs, for models that have multi-GPU shapes (``places``: the fleet,
    a :class:`~analytics.placement.fleet.Fleet` or any mapping of places in its order)."""
    fleet = as_fleet(places).frame
    states = newest_states(con).join(fleet.select("gpu_uuid"), on="gpu_uuid", how="semi")
    if states.is_empty():
        return []
    at: datetime = states["ts"].max()  # type: ignore[assignment]
    rows: list[StrandedRow] = []
    for model in sorted(set(pod_shapes) | set(job_shapes)):
        table = _domain_table(fleet.filter(pl.col("gpu_model") == model), states)
        for level in (*POD_LEVELS, *JOB_LEVELS):
            shapes = sorted(pod_shapes.get(model, set()) if level in POD_LEVELS else job_shapes.get(model, set()))
            rows.extend(_level_rows(at, model, level, table, shapes))
    return rows


def _domain_table(fleet: pl.DataFrame, states: pl.DataFrame) -> pl.DataFrame:
    """One row per GPU of a model's fleet (``spread.SCHEMA``), in its order: free at its newest state or not, its
    key at every level and, per level of ``PARENT``, its parent domain there."""
    table = fleet.join(states.select("gpu_uuid", "free"), on="gpu_uuid", how="left", maintain_order="left")
    return table.select(pl.col("free").fill_null(False), *LEVELS).with_columns(
        **{f"parent_{level}": pl.coalesce([pl.col(LEVELS[i]) for i in _parent_levels(level)]) for level in PARENT})


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
