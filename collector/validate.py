"""Check every sample value against what its metric can physically be; an impossible value becomes NULL.

One bad number (``-1e300`` bytes, ``1e19`` in an integer column, NaN, +-Inf, ``1e309``) must not sink a
scrape or a ``query_range`` chunk: :func:`validate_samples` turns each impossible value into NULL
("not measured", never zero) and counts it per metric and reason, so the run stores everything else
and says what it dropped. A sample whose value is its identity (a device's or holder's GPU-equivalents,
an XID's last-seen time) has no row without it and is dropped instead. Kueue's ``+Inf`` borrowing and
lending limits mean "no limit" and pass, as does KAI's quota of -1 (unlimited): the mapping stores them
as NULL.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl

from collector.dcgm_fields import MIB, READ_AS
from gpulens.core import metric_catalog as M

INT64_SAFE = 9.2e18
"""Largest magnitude that still fits a BIGINT column after rounding (2**63 is about 9.22e18)."""


@dataclass(frozen=True)
class Bounds:
    """The closed range ``[low, high]`` a metric's value can take, in the metric's own unit."""

    low: float = 0.0
    high: float = INT64_SAFE
    infinite_ok: bool = False
    """``+Inf`` is a meaning, not an error (Kueue's "no limit")."""


RATIO = Bounds(0.0, 1.0)
PERCENT = Bounds(0.0, 100.0)
EPOCH_SECONDS = Bounds(0.0, 1e11)
MEBIBYTES = Bounds(0.0, INT64_SAFE / MIB)

TEMPERATURE = Bounds(-273.15, 1e4)

BOUNDS_BY_DCGM_UNIT: Mapping[str, Bounds] = {
    "%": PERCENT,
    "ratio": RATIO,
    "MiB": MEBIBYTES,
    "degC": TEMPERATURE,
}
"""dcgm-exporter names whose range differs from the default, by the unit of the name."""

XID_CODE = Bounds(0.0, 2**31 - 1)

UNBOUNDED_DCGM_FIELDS = frozenset({"sm_active"})
"""Fields kept out of their unit's range: SM_ACTIVE reads above 1.0 on MIG (NVIDIA/DCGM#152)."""

BOUNDS: Mapping[str, Bounds] = {
    **{name: BOUNDS_BY_DCGM_UNIT[unit.name] for name, (field, unit) in READ_AS.items()
       if unit.name in BOUNDS_BY_DCGM_UNIT and field.key not in UNBOUNDED_DCGM_FIELDS},
    **{name: XID_CODE for name, (field, _) in READ_AS.items() if field.key == "xid"},
    M.DEVICE_ACTIVITY_RATIO.name: RATIO,
    M.DEVICE_GPU_EQUIVALENTS.name: RATIO,
    M.ALLOCATION_GPU_EQUIVALENTS.name: RATIO,
    M.GPU_TEMPERATURE_CELSIUS.name: TEMPERATURE,
    M.GPU_XID_LAST_SEEN.name: EPOCH_SECONDS,
    "kueue_cluster_queue_borrowing_limit": Bounds(infinite_ok=True),
    "kueue_cluster_queue_lending_limit": Bounds(infinite_ok=True),
    # KAI Scheduler's quota gauge is -1 for an unlimited quota (a meaning; the mapping stores NULL)
    **{name: Bounds(low=-1.0) for name in ("kai_queue_deserved_gpus", "queue_deserved_gpus")},
}
"""Metrics whose range differs from the default: finite, ``0 <= value <= INT64_SAFE``."""

DEFAULT = Bounds()

IDENTITY_METRICS = (
    M.DEVICE_GPU_EQUIVALENTS.name,
    M.ALLOCATION_GPU_EQUIVALENTS.name,
    M.GPU_XID_LAST_SEEN.name,
)
"""Samples that make no row without their value: an impossible value drops the sample."""


@dataclass(frozen=True)
class Rejections:
    """Impossible values set to NULL (or dropped), counted per (metric, reason)."""

    counts: Mapping[tuple[str, str], int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def describe(self, limit: int = 3) -> str:
        """``3 impossible values set to NULL: gpulens_device_memory_used_bytes not finite x2, ...``."""
        parts = [f"{metric} {reason} x{n}" for (metric, reason), n in sorted(self.counts.items())]
        more = f", +{len(parts) - limit} more" if len(parts) > limit else ""
        return f"{self.total} impossible value(s) set to NULL: " + ", ".join(parts[:limit]) + more

    def __add__(self, other: Rejections) -> Rejections:
        merged = dict(self.counts)
        for key, n in other.counts.items():
            merged[key] = merged.get(key, 0) + n
        return Rejections(merged)


def _bound(metric: str, attribute: str) -> pl.Expr:
    """The per-row ``low`` / ``high`` bound of ``metric`` as an expression (default for unlisted ones)."""
    mapping = {name: getattr(b, attribute) for name, b in BOUNDS.items()}
    return pl.col(metric).replace_strict(mapping, default=getattr(DEFAULT, attribute), return_dtype=pl.Float64)


def validate_samples(long: pl.DataFrame) -> tuple[pl.DataFrame, Rejections]:
    """``long`` with impossible values set to NULL (identity samples dropped), and what was rejected."""
    if long.height == 0 or "value" not in long.columns:
        return long, Rejections()
    value = pl.col("value")
    infinite_ok = pl.col("metric").is_in([m for m, b in BOUNDS.items() if b.infinite_ok])
    reason = (
        pl.when(value.is_null()).then(pl.lit(None, dtype=pl.Utf8))
        .when(value.is_nan()).then(pl.lit("NaN"))
        .when(value.is_infinite() & infinite_ok & (value > 0)).then(pl.lit(None, dtype=pl.Utf8))
        .when(value.is_infinite()).then(pl.lit("not finite"))
        .when(value < _bound("metric", "low")).then(pl.lit("below its range"))
        .when(value > _bound("metric", "high")).then(pl.lit("above its range"))
        .otherwise(pl.lit(None, dtype=pl.Utf8))
    )
    checked = long.with_columns(reason.alias("_reject"))
    bad = checked.filter(pl.col("_reject").is_not_null())
    if bad.height == 0:
        return long, Rejections()
    counts = {
        (str(m), str(r)): int(n)
        for m, r, n in bad.group_by("metric", "_reject").len().iter_rows()
    }
    identity = pl.col("metric").is_in(IDENTITY_METRICS)
    cleaned = (
        checked.filter(pl.col("_reject").is_null() | ~identity)
        .with_columns(pl.when(pl.col("_reject").is_null()).then(value).alias("value"))
        .drop("_reject")
    )
    return cleaned, Rejections(counts)
