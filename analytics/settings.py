"""Settings of one analysis run: window, thresholds, pricing choices, risk weights and health rules.

Every default is explained in ``docs/analytics.md``; a YAML file can override any of them
(``gpulens.core.config.load_yaml_model(path, AnalysisSettings)``).
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from analytics.cost_rules import MIG_PRORATIONS, UNALLOCATED_SHARING
from analytics.focus_formats import FOCUS_FORMATS
from analytics.placement.settings import TopologySettings
from gpulens.core.registry import Registry
from gpulens.core.states import HealthState
from gpulens.core.timeparse import duration_seconds, time_seconds, utc_datetime


def parse_duration(value: str | int | float) -> int:
    """A positive duration in whole seconds (``90s``, ``5m``, ``1h30m``, ``14d``, ``2w``, or a number of seconds)."""
    seconds = duration_seconds(value)
    if seconds <= 0:
        raise ValueError(f"duration must be positive, got {value!r}")
    if not seconds.is_integer():
        raise ValueError(f"duration must be whole seconds, got {value!r}")
    return int(seconds)


class RiskWeights(BaseModel):
    """Points of each isolation-risk term (the score is their sum, capped at 100)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode_exclusive: float = 0
    mode_mig: float = 10
    mode_mps: float = 30
    mode_time_slicing: float = 40
    per_gpu_cotenant: float = 10
    gpu_cotenant_max: float = 30
    per_node_cotenant: float = 2
    node_cotenant_max: float = 10
    no_network_policy: float = 10
    no_dedicated_pool_or_vcluster: float = 5
    telemetry_blind_spot: float = 10
    per_shared_fault: float = 5
    shared_fault_max: float = 20

    def mode_base(self, mode: str | None) -> float:
        return {
            "exclusive": self.mode_exclusive,
            "mig": self.mode_mig,
            "mps": self.mode_mps,
            "time-slicing": self.mode_time_slicing,
        }.get(mode or "exclusive", self.mode_exclusive)


class TrendRule(BaseModel):
    """One early-warning signal: a one-sided CUSUM over per-hour rates in buckets (see ``analytics/early_warning.py``).

    Buckets above the allowance ``k = max(floor, baseline_factor x the GPU's own median)`` add their excess
    (rate x bucket hours); the trend is raised when the sum reaches ``decision``, at least ``min_hours``
    hours since the run-up began were above ``k``, and the trailing hour grew by ``growth``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    floor: float = Field(ge=0)
    baseline_factor: float = Field(3.0, ge=0)
    decision: float = Field(gt=0)
    min_hours: float = Field(1.0, gt=0)
    growth: float = Field(2.0, ge=1)
    """The trailing hour's mean is at least this multiple of the mean of the hour after the run-up's first bucket."""
    bucket_seconds: int = Field(900, gt=0)
    """Trend bucket of the rates: 15 minutes by default (an hour for sparse events such as XIDs); not the analysis
    bucket, ``AnalysisSettings.bucket_seconds`` (the config key keeps its recorded name)."""

    @field_validator("bucket_seconds", mode="before")
    @classmethod
    def _duration(cls, value: str | int) -> int:
        seconds = parse_duration(value)
        if 3600 % seconds and seconds % 3600:
            raise ValueError(f"bucket of {seconds}s neither divides nor is a multiple of an hour")
        return seconds


class EarlyWarningRules(BaseModel):
    """Trends that precede hard failures; a GPU with a raised trend is ``watch`` and a drain candidate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ecc_corrected_per_hour: TrendRule = TrendRule(floor=3.0, decision=60.0)
    pcie_replays_per_hour: TrendRule = TrendRule(floor=60.0, decision=600.0)
    nvlink_crc_per_hour: TrendRule = TrendRule(floor=5000.0, decision=50000.0)
    thermal_seconds_per_hour: TrendRule = TrendRule(floor=60.0, baseline_factor=0.0, decision=600.0)
    clock_drop_minutes_per_hour: TrendRule = TrendRule(floor=3.0, baseline_factor=0.0, decision=30.0)
    hardware_xids_per_hour: TrendRule = TrendRule(
        floor=0.1, baseline_factor=0.0, decision=1.8, min_hours=2, growth=1.0, bucket_seconds=3600
    )
    clock_drop_ratio: float = Field(0.7, gt=0, lt=1)
    """A sample's SM clock below this share of the GPU's 95th percentile over the same UTC day (the day
    part's span), while drawing at least ``clock_drop_power_ratio`` of that day's 95th-percentile power,
    counts as a clock drop under load."""
    clock_drop_power_ratio: float = Field(0.5, gt=0, lt=1)
    clock_reference_seconds: int = Field(12 * 3600, ge=0, le=86400)
    """The day's clock and power readings of a GPU must span at least this long for its 95th percentiles to be
    a reference: with less (the first hours of today, a window starting late in a day) its clock drops are
    unmeasured, not judged against a night's idle power."""
    quiet_seconds: int = Field(6 * 3600, ge=0)
    """A trend that fell back (its sum returned to 0) longer than this before the window end no longer counts."""

    @model_validator(mode="after")
    def _buckets_nest(self) -> EarlyWarningRules:
        finest = self.finest_trend_bucket_seconds()
        odd = sorted(n for n, r in self.rules().items() if r.bucket_seconds % finest)
        if odd:
            raise ValueError(f"bucket_seconds of {odd} is not a multiple of the finest bucket ({finest}s)")
        if 86400 % finest:
            raise ValueError(f"the finest bucket ({finest}s) must divide a day: day parts are cut at UTC midnight")
        return self

    def finest_trend_bucket_seconds(self) -> int:
        return min(r.bucket_seconds for r in self.rules().values())

    def rules(self) -> dict[str, TrendRule]:
        """Signal name -> rule."""
        return {
            "ecc_corrected_per_hour": self.ecc_corrected_per_hour,
            "pcie_replays_per_hour": self.pcie_replays_per_hour,
            "nvlink_crc_per_hour": self.nvlink_crc_per_hour,
            "thermal_seconds_per_hour": self.thermal_seconds_per_hour,
            "clock_drop_minutes_per_hour": self.clock_drop_minutes_per_hour,
            "hardware_xids_per_hour": self.hardware_xids_per_hour,
        }


class HealthRules(BaseModel):
    """Which signals make a GPU ``warn`` or ``drain`` (defaults from NVIDIA's XID catalog and DCGM).

    An XID in both ``drain_xids`` and ``warn_xids`` drains.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    drain_xids: frozenset[int] = frozenset(
        {46, 48, 62, 64, 74, 79, 95, 110, 119, 120, 136, 140, 143, 155, 156, 158}
    )
    warn_xids: frozenset[int] = frozenset({8, 61, 63, 92, 94, 109, 121, 154, *range(144, 151)})
    application_xids: frozenset[int] = frozenset({13, 31, 43, 45, 68})
    unknown_xid_state: HealthState = HealthState.WARN
    retired_pages_drain: int = Field(default=63, ge=1)
    nvlink_crc_per_second_warn: float = Field(default=100.0, gt=0)
    thermal_violation_seconds_warn: float = Field(default=0.0, ge=0)
    silent_after_seconds: float = Field(default=900.0, gt=0, allow_inf_nan=False)
    """A GPU without a physical sample for this long before the fleet's last one warns (samples stopped)."""
    thin_share: float = Field(default=0.5, gt=0, le=1)
    """A GPU with fewer samples than this share of the fleet's median over ``thin_lookback_seconds`` warns."""
    thin_lookback_seconds: float = Field(default=3600.0, gt=0, allow_inf_nan=False)
    thin_min_samples: int = Field(default=10, ge=1)
    """Thinning is judged only where the fleet's median count is at least this (too few samples say nothing)."""
    early_warning: EarlyWarningRules = EarlyWarningRules()

    @model_validator(mode="after")
    def _application_errors_never_drain(self) -> HealthRules:
        both = self.application_xids & (self.drain_xids | self.warn_xids)
        if both:
            raise ValueError(f"XIDs {sorted(both)} are both application errors and warn/drain XIDs")
        return self


DEFAULT_ACTIVITY_THRESHOLD = 0.05
"""The activity ratio below which held time is idle, unless ``--activity-threshold`` says otherwise (the
recording rule ``tenant:gpulens_idle_gpu_equivalents:sum`` states the same number)."""


MEMORY_LIMIT = re.compile(r"^\d+(\.\d+)?\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)$")
"""A size DuckDB's ``memory_limit`` takes (the only shape passed to it)."""

_REGISTERED: dict[str, Registry[Any]] = {
    "mig_proration": MIG_PRORATIONS, "unallocated": UNALLOCATED_SHARING, "focus_formats": FOCUS_FORMATS,
}
"""The settings that name a registered choice, and the registry of each."""


class AnalysisSettings(BaseModel):
    """Parameters of ``analyze``: all of them are recorded with the results."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_seconds: int = 14 * 86400
    bucket_seconds: int = 3600
    """Grain of the stored rows (device detail, fragmentation); idle is decided per sample, so it moves no idle figure."""
    end: datetime | None = None
    """Window end (exclusive, UTC; rounded up to a bucket); default: the last complete bucket of the data (the
    bucket boundary at or before the end of the newest sample, never after now)."""
    activity_threshold: float = Field(DEFAULT_ACTIVITY_THRESHOLD, ge=0, le=1)
    """Allocated devices with activity below this ratio are ``allocated-idle``."""
    sample_interval_seconds: float | None = Field(None, gt=0)
    """Time one sample stands for; default: inferred from the samples."""
    prices_path: Path | None = None
    mig_proration: str = "slices"
    """A rule of :data:`~analytics.cost_rules.MIG_PRORATIONS`: how a MIG instance's share of its GPU is priced."""
    unallocated: str = "own-line"
    """A rule of :data:`~analytics.cost_rules.UNALLOCATED_SHARING`: where unallocated cost goes."""
    parquet_dir: Path | None = None
    """Read fact tables from Hive-partitioned Parquet here (``<dir>/<table>/...``) instead of the store."""
    out_dir: Path | None = None
    """Write the FOCUS chargeback here, in each of ``focus_formats``."""
    focus_formats: tuple[str, ...] | None = None
    """Names of :data:`~analytics.focus_formats.FOCUS_FORMATS` written to ``out_dir``; None: every one."""
    memory_limit: str = "3GB"
    """DuckDB memory limit (it spills to disk beyond it): 3 GB leaves the process under the 4 GiB that the
    manifests give an analysis pod (DuckDB's cache fills up to its limit; Python and Arrow need the rest).
    Not a parameter of the run: the rows are the same under any limit, only time and memory differ."""
    node_ranges: int = Field(1, ge=1)
    """Cut each day into this many ranges of nodes, a part each (``analytics/node_ranges.py``); the rows are the
    same as of whole days, only the parts differ (so it is no parameter of the run). Needs
    ``sample_interval_seconds``."""
    risk: RiskWeights = RiskWeights()
    health: HealthRules = HealthRules()
    topology: TopologySettings = TopologySettings()

    @field_validator("window_seconds", "bucket_seconds", mode="before")
    @classmethod
    def _duration(cls, value: str | int) -> int:
        return parse_duration(value)

    @field_validator("memory_limit")
    @classmethod
    def _memory(cls, value: str) -> str:
        if not MEMORY_LIMIT.match(value):
            raise ValueError(f"{value!r} is not a size like 3GB, 1536MB or 512MiB")
        return value

    @field_validator("mig_proration", "unallocated", "focus_formats")
    @classmethod
    def _registered(cls, value: str | tuple[str, ...] | None, info: ValidationInfo) -> str | tuple[str, ...] | None:
        """A named choice must be in its registry (the refusal names the choices there are)."""
        registry = _REGISTERED[str(info.field_name)]
        names = (value,) if isinstance(value, str) else value or ()
        refused = [why for name in names if (why := registry.refusal(name))]
        if refused:
            raise ValueError("; ".join(refused))
        return value

    @field_validator("end", mode="before")
    @classmethod
    def _time(cls, value: object) -> object:
        """``end`` in the one time grammar: ISO 8601, Unix seconds or ``now-1h``."""
        if value is None or isinstance(value, datetime):
            return value
        if isinstance(value, str | int | float):
            return utc_datetime(time_seconds(value))
        return value

    @model_validator(mode="after")
    def _bucket_fits(self) -> AnalysisSettings:
        if 86400 % self.bucket_seconds:
            raise ValueError(f"bucket of {self.bucket_seconds}s does not divide a day (use e.g. 1m, 5m, 15m, 1h)")
        if self.window_seconds % self.bucket_seconds:
            raise ValueError("window must be a whole number of buckets")
        return self

    def parameters(self) -> dict[str, object]:
        """The settings that shape the numbers, as JSON-able data (paths and output options left out)."""
        data = self.model_dump(mode="json", exclude={"out_dir", "focus_formats", "memory_limit", "end",
                                                          "node_ranges"})
        return data
