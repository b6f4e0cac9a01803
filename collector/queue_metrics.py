"""Map KAI Scheduler, Volcano and Kueue cohort queue metrics into ``quota_snapshots`` and ``pending_demand``.

Each becomes the same quota model as a Kueue ClusterQueue (quota, ceiling, usage, pending), with the
object kind naming its system (:mod:`collector.queue_systems`):

- KAI Scheduler (queue controller and scheduler, label ``queue_name``; KAI prefixes them with its metrics
  namespace, ``kai_`` by default, none with ``--metrics-namespace=""``, so both spellings are read):
  ``queue_deserved_gpus`` is ``spec.resources.gpu.quota`` (``-1``: unlimited, stored NULL with
  ``annotations.quota = "unlimited"``), ``queue_allocated_gpus`` the GPUs allocated now, and
  ``queue_fair_share_gpu`` the scheduler's fair share (``annotations.fairShareGpus``). One entry per
  queue, resource ``nvidia.com/gpu``, no flavor. KAI exports no pending demand: that comes from the
  Queue objects (``collect --kubernetes``).
- Volcano (``volcano_queue_*_scalar_resources{queue_name,resource}``, in milli-units as Volcano keeps scalar
  resources, divided by 1000 here): ``deserved`` is the quota, ``capacity`` the ceiling
  (``borrowing_limit = capacity - deserved``), ``allocated`` the usage, ``request - allocated`` the pending
  quantity. Device resources (``nvidia.com/*``) only.
- Kueue cohorts (``kueue_cohort_subtree_quota`` / ``kueue_cohort_subtree_resource_reservations``
  ``{cohort,flavor,resource}``, ``kueue_cohort_weighted_share{cohort}``): kind ``Cohort``, the subtree's
  quota and reservations, its weighted share as ``annotations.weightedShare``. A cohort is a view of its
  ClusterQueues: it is shown, never recommended or written.

A value a system did not export stays NULL (not measured), never 0.
"""

from __future__ import annotations

import json

import polars as pl

from collector.queue_systems import COHORT, KAI_QUEUE, VOLCANO_QUEUE, pending_queue

GPU_RESOURCE = "nvidia.com/gpu"
KAI_PREFIX = "kai_"
KAI_QUOTA, KAI_ALLOCATED, KAI_FAIR_SHARE = "queue_deserved_gpus", "queue_allocated_gpus", "queue_fair_share_gpu"
KAI_METRICS = tuple(f"{prefix}{name}" for name in (KAI_QUOTA, KAI_ALLOCATED, KAI_FAIR_SHARE)
                    for prefix in (KAI_PREFIX, ""))
VOLCANO_PARTS = ("deserved", "capacity", "allocated", "request")
VOLCANO_METRICS = tuple(f"volcano_queue_{part}_scalar_resources" for part in VOLCANO_PARTS)
VOLCANO_MILLI = 1000.0
COHORT_QUOTA, COHORT_RESERVED, COHORT_SHARE = (
    "kueue_cohort_subtree_quota", "kueue_cohort_subtree_resource_reservations", "kueue_cohort_weighted_share")
COHORT_METRICS = (COHORT_QUOTA, COHORT_RESERVED, COHORT_SHARE)

QUEUE_SYSTEM_METRICS = KAI_METRICS + VOLCANO_METRICS + COHORT_METRICS
"""Queue metrics of KAI Scheduler, Volcano and Kueue cohorts the collector reads (next to Kueue's own)."""

_TS = pl.from_epoch(pl.col("ts_ms"), time_unit="ms").alias("ts")
_NULL = pl.lit(None, dtype=pl.Float64)


def _with_labels(df: pl.DataFrame, names: tuple[str, ...]) -> pl.DataFrame:
    missing = [n for n in names if n not in df.columns]
    return df.with_columns([pl.lit(None, dtype=pl.Utf8).alias(n) for n in missing])


def _value(metrics: tuple[str, ...] | str) -> pl.Expr:
    names = (metrics,) if isinstance(metrics, str) else metrics
    return pl.col("value").filter(pl.col("metric").is_in(names) & pl.col("value").is_finite()).first()


def _notes(**parts: pl.Expr) -> pl.Expr:
    """A JSON annotations object of the non-null ``parts`` (NULL when none is known)."""
    fields = pl.struct(*(expr.alias(name) for name, expr in parts.items()))
    return fields.map_elements(
        lambda row: json.dumps({k: v for k, v in row.items() if v is not None}, sort_keys=True) if any(
            v is not None for v in row.values()) else None, return_dtype=pl.Utf8)


def _quota_rows(df: pl.DataFrame, kind: str, source: str) -> pl.DataFrame:
    return df.select(
        "ts", pl.lit(kind).alias("object_kind"), pl.lit("").alias("object_namespace"),
        pl.col("queue").alias("object_name"), pl.col("queue").alias("tenant"), "flavor", "resource",
        "nominal_quota", "borrowing_limit", pl.lit(None, dtype=pl.Float64).alias("lending_limit"), "usage",
        "annotations", pl.lit(source).alias("source"),
    )


def map_kai(long: pl.DataFrame, source: str) -> dict[str, pl.DataFrame]:
    """KAI queues' GPU quota, allocation and fair share (metric names with or without KAI's prefix)."""
    rows = long.filter(pl.col("metric").is_in(KAI_METRICS))
    if rows.height == 0:
        return {}
    both = lambda name: (f"{KAI_PREFIX}{name}", name)  # noqa: E731
    per_queue = (
        _with_labels(rows, ("queue_name",)).filter(pl.col("queue_name").is_not_null()).with_columns(_TS)
        .group_by("ts", pl.col("queue_name").alias("queue"))
        .agg(quota=_value(both(KAI_QUOTA)), usage=_value(both(KAI_ALLOCATED)), fair=_value(both(KAI_FAIR_SHARE)))
        .filter(pl.col("quota").is_not_null() | pl.col("usage").is_not_null())
    )
    unlimited = pl.col("quota") < 0
    frame = per_queue.with_columns(
        flavor=pl.lit(""), resource=pl.lit(GPU_RESOURCE),
        nominal_quota=pl.when(unlimited).then(_NULL).otherwise(pl.col("quota")),
        borrowing_limit=_NULL,
        annotations=_notes(quota=pl.when(unlimited).then(pl.lit("unlimited")), fairShareGpus=pl.col("fair")),
    )
    return {"quota_snapshots": _quota_rows(frame, KAI_QUEUE, source)}


def map_volcano(long: pl.DataFrame, source: str) -> dict[str, pl.DataFrame]:
    """Volcano queues' device quotas (deserved, capacity), allocation and pending request."""
    rows = long.filter(pl.col("metric").is_in(VOLCANO_METRICS))
    if rows.height == 0:
        return {}
    df = (_with_labels(rows, ("queue_name", "resource"))
          .filter(pl.col("queue_name").is_not_null() & pl.col("resource").str.starts_with("nvidia.com/"))
          .with_columns(_TS, value=pl.col("value") / VOLCANO_MILLI))
    per_entry = df.group_by("ts", pl.col("queue_name").alias("queue"), "resource").agg(
        **{part: _value(f"volcano_queue_{part}_scalar_resources") for part in VOLCANO_PARTS})
    frame = per_entry.with_columns(
        flavor=pl.lit(""), nominal_quota=pl.col("deserved"), usage=pl.col("allocated"),
        borrowing_limit=pl.when(pl.col("capacity") >= pl.col("deserved"))
        .then(pl.col("capacity") - pl.col("deserved")),
        annotations=_notes(capacity=pl.col("capacity")),
    ).filter(pl.col("nominal_quota").is_not_null() | pl.col("usage").is_not_null())
    pending = per_entry.filter(pl.col("request").is_not_null() & pl.col("allocated").is_not_null()).select(
        "ts", pl.col("queue").alias("tenant"),
        pl.col("queue").map_elements(lambda q: pending_queue(VOLCANO_QUEUE, q), return_dtype=pl.Utf8)
        .alias("cluster_queue"),
        pl.lit("").alias("namespace"), pl.lit("").alias("flavor"), "resource",
        pl.coalesce(pl.col("resource").str.extract(r"^nvidia\.com/mig-(.+)$", 1), pl.lit("gpu")).alias("profile"),
        pl.lit("").alias("gpu_model"),
        (pl.col("request") - pl.col("allocated")).clip(lower_bound=0).alias("quantity"),
        pl.lit(0, dtype=pl.Int32).alias("workloads"), pl.lit(source).alias("source"),
    ).filter(pl.col("quantity") > 0)
    return {"quota_snapshots": _quota_rows(frame, VOLCANO_QUEUE, source), "pending_demand": pending}


def map_cohorts(long: pl.DataFrame, source: str) -> dict[str, pl.DataFrame]:
    """Kueue cohorts' subtree quota and reservations per flavor and resource, with their weighted share."""
    rows = long.filter(pl.col("metric").is_in(COHORT_METRICS))
    if rows.height == 0:
        return {}
    df = _with_labels(rows, ("cohort", "flavor", "resource")).filter(pl.col("cohort").is_not_null()).with_columns(_TS)
    share = (df.filter(pl.col("metric") == COHORT_SHARE).group_by("ts", "cohort")
             .agg(share=_value(COHORT_SHARE)))
    entries = (
        df.filter(pl.col("metric").is_in((COHORT_QUOTA, COHORT_RESERVED)) & pl.col("resource").is_not_null())
        .group_by("ts", "cohort", pl.col("flavor").fill_null(""), "resource")
        .agg(nominal_quota=_value(COHORT_QUOTA), usage=_value(COHORT_RESERVED))
        .join(share, on=["ts", "cohort"], how="left")
    )
    frame = entries.with_columns(
        queue=pl.col("cohort"), borrowing_limit=_NULL, annotations=_notes(weightedShare=pl.col("share")))
    return {"quota_snapshots": _quota_rows(frame, COHORT, source)}


def map_queue_systems(long: pl.DataFrame, source: str) -> list[dict[str, pl.DataFrame]]:
    """The store frames of every queue system's metrics in ``long``."""
    return [map_kai(long, source), map_volcano(long, source), map_cohorts(long, source)]
