"""The 5-minute rollup series that deploy/prometheus's recording rules record, per base metric the collector reads.

One entry per fast-moving gauge: its rollup record (``level:metric:operations``), the ``*_over_time``
function the rule applies over ``[5m]`` and why. Every other series the collector reads (counters,
info series, allocations, slow gauges) has no rollup and is read raw at the rollup step: a counter's
value at a step is exact, and an allocation read at the step names the holder at that instant (a
``max_over_time`` would credit a pod that lived ten seconds with five minutes, and two successive
holders of one device with the device twice). ``tests/test_collector_rollups.py`` holds the rules
file to this table.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from collector.dcgm_fields import BY_KEY
from gpulens.core import metric_catalog as M

ROLLUP_GROUP = "gpulens.rollup.rules"
"""The rule group in deploy/prometheus/gpulens-rules.yaml that records the rollups."""

ROLLUP_INTERVAL_SECONDS = 300.0
"""The rollup span and the group's evaluation interval: ``--rollups`` collects at exactly this step."""

ROLLUP_SOURCE = "prometheus-rollup"
"""Source prefix of windows collected from rollups (``prometheus-rollup:<base URL>``), apart from raw ones."""


@dataclass(frozen=True)
class Rollup:
    """The rollup record of one base metric."""

    base: str
    """The series the exporter (or dcgm-exporter) exposes and the collector maps."""
    level: str
    """The record's level: ``device`` or ``gpu`` (every label of the base series is kept)."""
    function: str
    """``avg_over_time``, ``max_over_time`` or ``min_over_time``."""

    @property
    def record(self) -> str:
        """``level:metric:operations``, e.g. ``device:gpulens_device_activity_ratio:avg5m``."""
        return f"{self.level}:{self.base}:{self.function.removesuffix('_over_time')}5m"

    @property
    def expr(self) -> str:
        """The recording rule's PromQL: no ``by`` clause, so no label of the base series is dropped."""
        return f"{self.function}({self.base}[5m])"


DCGM_ROLLED_UP: tuple[tuple[str, str, str], ...] = (
    ("gpu_util", "device", "avg_over_time"),
    ("gr_engine", "device", "avg_over_time"),
    ("sm_active", "device", "avg_over_time"),
    ("fb_used", "device", "max_over_time"),
    # used + free + reserved is the memory size at every instant, so min(free) = size - reserved - max(used):
    # the collector's total (used + free + reserved) stays exact with the peak of used.
    ("fb_free", "device", "min_over_time"),
    ("power", "gpu", "avg_over_time"),
    ("temperature", "gpu", "max_over_time"),
    ("sm_clock", "gpu", "avg_over_time"),
    ("memory_clock", "gpu", "avg_over_time"),
)
"""dcgm-exporter fields rolled up (:mod:`collector.dcgm_fields` keys): each under every name it has had."""

ROLLUPS: tuple[Rollup, ...] = (
    # Idle is decided per rollup point from the 5-minute mean activity.
    Rollup(M.DEVICE_ACTIVITY_RATIO.name, "device", "avg_over_time"),
    # Memory is sized for its peak: rightsizing must not see a 5-minute spike averaged away.
    Rollup(M.DEVICE_MEMORY_USED_BYTES.name, "device", "max_over_time"),
    Rollup(M.GPU_POWER_WATTS.name, "gpu", "avg_over_time"),
    Rollup(M.GPU_TEMPERATURE_CELSIUS.name, "gpu", "max_over_time"),
    # Early warning counts points whose clock is under 70 % of the day's 95th-percentile clock while power
    # is at least half its 95th percentile: with the mean, reference and point are the same statistic and
    # a sustained drop counts fully, while a one-second dip does not become five minutes of drop (min would).
    Rollup(M.GPU_SM_CLOCK_HERTZ.name, "gpu", "avg_over_time"),
    Rollup(M.GPU_MEMORY_CLOCK_HERTZ.name, "gpu", "avg_over_time"),
    # A 0/1 gauge: a reason active at any moment of the 5 minutes is listed (its share of time is not kept).
    Rollup(M.GPU_THROTTLE_ACTIVE.name, "gpu", "max_over_time"),
    # A GPU lost at any moment of the 5 minutes is lost for the point: health never misses a loss.
    Rollup(M.GPU_UP.name, "gpu", "min_over_time"),
    # dcgm-exporter's names, of every generation (mapped to the same tables; each is converted by its own
    # name after the rollup).
    *(Rollup(name, level, function) for key, level, function in DCGM_ROLLED_UP for name in BY_KEY[key].names),
)
"""The rollups, in the order of the rule group."""

BY_BASE: dict[str, Rollup] = {r.base: r for r in ROLLUPS}


def query_name(base: str) -> str:
    """The series to read for ``base`` with ``--rollups``: its rollup record, or ``base`` itself (read raw)."""
    rollup = BY_BASE.get(base)
    return rollup.record if rollup is not None else base


def drop_unread_device_rows(device_samples: pl.DataFrame) -> pl.DataFrame:
    """Device rows that only the series read raw at the step (GE, memory size) made, for a device whose
    activity or memory used is rolled up elsewhere in the chunk: no reading of it reached the rollup of
    that span (a scrape gap), so the span is not collected (unknown), not measured-as-NULL (unmeasured).
    A device that has no such reading anywhere in the chunk (e.g. an A100 MIG instance) keeps its rows."""
    read = pl.col("activity_ratio").is_not_null() | pl.col("memory_used_bytes").is_not_null()
    return device_samples.filter(read | ~read.any().over("device_id"))
