"""Early warning: per-GPU trends that precede hard failures, each with when it started and when it was seen.

Hourly values per GPU (from ``f_gpu_samples`` and ``f_events``): new correctable ECC errors, PCIe
replays and NVLink CRC errors per hour, thermal-violation seconds per hour, minutes of clock drop under
load per hour, and warn-class hardware XIDs (63, 92, 94, ...) per hour. Each runs through a one-sided
CUSUM, ``S = max(0, S + x - k)``, with the allowance ``k = max(floor, factor x the GPU's own median)``
so a GPU that always runs a little high stays quiet. A trend is raised at the first hour where
``S >= decision`` with at least ``min_hours`` hours above ``k`` since the run-up began and a value at
least ``growth`` times the higher of the run-up's first two hours (a rise, not a plateau or a burst); it *started*
at the first hour of that run-up. Everything is causal: the hour a trend is raised only uses hours up to
it, so a run at that hour would have seen it. Hours without readings (NULL) add nothing: unmeasured is
not zero, and a trend is never raised from missing data.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb
import numpy as np

from gpulens.analytics.facts import Window
from gpulens.analytics.settings import EarlyWarningRules, HealthRules, TrendRule

HOUR = 3600

SIGNAL_WORDS = {
    "ecc_corrected_per_hour": ("correctable ECC errors", "/h"),
    "pcie_replays_per_hour": ("PCIe replays", "/h"),
    "nvlink_crc_per_hour": ("NVLink CRC errors", "/h"),
    "thermal_seconds_per_hour": ("thermal throttling", " s/h"),
    "clock_drop_minutes_per_hour": ("SM clock drops under load", " min/h"),
    "hardware_xids_per_hour": ("warn-class hardware XIDs", "/h"),
}


@dataclass(frozen=True)
class HourlySignals:
    """Hourly values of every signal: ``values[name]`` has shape (GPUs, hours), NaN where not measured."""

    gpus: tuple[str, ...]
    start: datetime
    hours: int
    values: dict[str, np.ndarray]

    def hour_start(self, i: int) -> datetime:
        return self.start + timedelta(hours=i)


@dataclass(frozen=True)
class Trend:
    """A raised early-warning trend on one GPU."""

    gpu_uuid: str
    signal: str
    started: datetime
    """First hour of the run-up (the CUSUM change point)."""
    detected: datetime
    """End of the hour the trend was raised in: a run at this time sees it."""
    allowance: float
    latest: float | None
    """Value in the last measured hour of the window."""
    peak: float
    score: float
    """CUSUM sum at its highest in the window."""
    hours_above: int
    ended: datetime | None
    """When the sum fell back to 0 (None: still rising or high at the window end)."""

    def reason(self) -> str:
        what, unit = SIGNAL_WORDS[self.signal]
        latest = "not measured in the last hour" if self.latest is None else f"{self.latest:.4g}{unit} in the last hour"
        tail = f"; fell back at {self.ended:%Y-%m-%d %H:%M}" if self.ended else ""
        return (
            f"{what} rising since {self.started:%Y-%m-%d %H:%M} (seen {self.detected:%H:%M}): peak {self.peak:.4g}{unit}, "
            f"{latest}, {self.allowance:.4g}{unit} allowed, {self.hours_above} h above{tail}"
        )


def hourly_signals(con: duckdb.DuckDBPyConnection, window: Window, health: HealthRules) -> HourlySignals:
    """Hourly values of every GPU in ``an_dev`` over the window (hours aligned to the window start)."""
    rules = health.early_warning
    gpus = tuple(r[0] for r in con.execute("SELECT DISTINCT gpu_uuid FROM an_dev ORDER BY 1").fetchall())
    hours = max(1, -(-int((window.end - window.start).total_seconds()) // HOUR))
    index = {g: i for i, g in enumerate(gpus)}
    values = {name: np.full((len(gpus), hours), np.nan) for name in rules.rules()}
    params = {"start": window.start, "end": window.end, "drop": rules.clock_drop_ratio,
              "power": rules.clock_drop_power_ratio}
    rows = con.execute(
        """
        WITH s AS (
            SELECT gpu_uuid, ts, floor((epoch(ts) - epoch($start::TIMESTAMP)) / 3600)::BIGINT AS h,
                   ecc_corrected_total AS ecc, pcie_replay_total AS pcie, nvlink_crc_errors_total AS crc,
                   thermal_violation_seconds_total AS thermal, sm_clock_hz AS clk, power_watts AS pw
            FROM f_gpu_samples WHERE ts >= $start AND ts < $end AND up IS NOT FALSE
        ), ref AS (
            SELECT gpu_uuid, quantile_cont(clk, 0.95) AS clk95, quantile_cont(pw, 0.95) AS pw95 FROM s GROUP BY 1
        ), b AS (
            SELECT s.gpu_uuid, h, max(ts) AS ts, max(ecc) AS ecc, max(pcie) AS pcie, max(crc) AS crc,
                   max(thermal) AS thermal, count(clk) FILTER (WHERE pw IS NOT NULL) AS n_clk,
                   count(*) FILTER (WHERE clk < $drop * clk95 AND pw >= $power * pw95) AS slow
            FROM s JOIN ref USING (gpu_uuid) GROUP BY ALL
        ), d AS (
            SELECT gpu_uuid, h, epoch(ts) - epoch(lag(ts) OVER w) AS dt,
                   ecc - lag(ecc) OVER w AS ecc, pcie - lag(pcie) OVER w AS pcie, crc - lag(crc) OVER w AS crc,
                   thermal - lag(thermal) OVER w AS thermal,
                   CASE WHEN n_clk > 0 THEN 60.0 * slow / n_clk END AS slow
            FROM b WINDOW w AS (PARTITION BY gpu_uuid ORDER BY h)
        )
        SELECT gpu_uuid, h,
               CASE WHEN ecc >= 0 THEN ecc * 3600 / dt END, CASE WHEN pcie >= 0 THEN pcie * 3600 / dt END,
               CASE WHEN crc >= 0 THEN crc * 3600 / dt END, CASE WHEN thermal >= 0 THEN thermal * 3600 / dt END,
               slow
        FROM d WHERE dt > 0 OR slow IS NOT NULL
        """,
        params,
    ).fetchall()
    names = ("ecc_corrected_per_hour", "pcie_replays_per_hour", "nvlink_crc_per_hour", "thermal_seconds_per_hour",
             "clock_drop_minutes_per_hour")
    for gpu, h, *vals in rows:
        i = index.get(gpu)
        if i is None or not 0 <= h < hours:
            continue
        for name, v in zip(names, vals, strict=True):
            if v is not None:
                values[name][i, int(h)] = float(v)
    xids = values["hardware_xids_per_hour"]
    xids[:, :] = 0.0  # an hour without an XID event is a measured zero: events are reported when they happen
    warn = sorted(health.warn_xids)
    for gpu, h, n in con.execute(
        """
        SELECT gpu_uuid, floor((epoch(ts) - epoch($start::TIMESTAMP)) / 3600)::BIGINT AS h, sum(count)
        FROM f_events WHERE kind = 'xid' AND ts >= $start AND ts < $end AND list_contains($warn, code)
        GROUP BY ALL
        """,
        {"start": window.start, "end": window.end, "warn": warn},
    ).fetchall():
        i = index.get(gpu)
        if i is not None and 0 <= h < hours:
            xids[i, int(h)] = float(n)
    return HourlySignals(gpus, window.start, hours, values)


def detect(signals: HourlySignals, rules: EarlyWarningRules, *, until: int | None = None) -> list[Trend]:
    """Trends raised in the first ``until`` hours (all by default), at most one per GPU and signal."""
    end = signals.hours if until is None else min(until, signals.hours)
    out: list[Trend] = []
    for name, rule in rules.rules().items():
        out.extend(_cusum(signals, name, rule, end))
    return sorted(out, key=lambda t: (t.gpu_uuid, t.detected, t.signal))


def _cusum(signals: HourlySignals, name: str, rule: TrendRule, end: int) -> list[Trend]:
    x = signals.values[name][:, :end]
    n_g = x.shape[0]
    if n_g == 0 or end == 0:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a GPU with no reading at all: median 0
        median = np.nan_to_num(np.nanmedian(x, axis=1), nan=0.0)
    k = np.maximum(rule.floor, rule.baseline_factor * median)
    s = np.zeros(n_g)
    run_start = np.full(n_g, -1)
    first = np.zeros(n_g)
    above = np.zeros(n_g, dtype=np.int64)
    raised = np.full(n_g, -1)
    started = np.full(n_g, -1)
    ended = np.full(n_g, -1)
    peak_s = np.zeros(n_g)
    for h in range(end):
        v = x[:, h]
        measured = ~np.isnan(v)
        nxt = np.where(measured, np.maximum(0.0, s + np.nan_to_num(v) - k), s)
        rising = measured & (nxt > 0) & (s == 0)
        run_start = np.where(rising, h, run_start)
        first = np.where(rising, np.nan_to_num(v), np.where(measured & (h - run_start == 1), np.maximum(first, np.nan_to_num(v)), first))
        above = np.where(rising, 0, above) + (measured & (np.nan_to_num(v) > k))
        s = nxt
        grown = measured & (np.nan_to_num(v) >= rule.growth * first)
        fire = (raised < 0) & (s >= rule.decision) & (above >= rule.min_hours) & grown
        raised = np.where(fire, h, raised)
        started = np.where(fire, run_start, started)
        live = raised >= 0
        peak_s = np.where(live, np.maximum(peak_s, s), peak_s)
        ended = np.where(live & (s == 0) & (ended < 0), h, ended)
        ended = np.where(live & (s > 0), -1, ended)
    out = []
    for i in np.nonzero(raised >= 0)[0]:
        row = x[i]
        measured = np.nonzero(~np.isnan(row))[0]
        latest = float(row[measured[-1]]) if len(measured) else None
        run = row[started[i]:end]
        out.append(
            Trend(
                gpu_uuid=signals.gpus[i], signal=name, started=signals.hour_start(int(started[i])),
                detected=signals.hour_start(int(raised[i]) + 1), allowance=float(k[i]), latest=latest,
                peak=float(np.nanmax(run)) if np.any(~np.isnan(run)) else 0.0, score=float(peak_s[i]),
                hours_above=int(np.sum(run > k[i])),
                ended=signals.hour_start(int(ended[i])) if ended[i] >= 0 else None,
            )
        )
    return out


def counting(trends: list[Trend], window: Window, rules: EarlyWarningRules) -> list[Trend]:
    """Trends that still count at the window end: not fallen back, or fallen back within ``quiet_seconds``."""
    cutoff = window.end - timedelta(seconds=rules.quiet_seconds)
    return [t for t in trends if t.ended is None or t.ended >= cutoff]
