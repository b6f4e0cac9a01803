"""Early warning: per-GPU trends that precede hard failures, each with when it started and when it was seen.

Per GPU and time bucket (from ``f_gpu_samples`` and ``f_events``): new correctable ECC errors, PCIe
replays and NVLink CRC errors per hour, thermal-violation seconds per hour, minutes of clock drop under
load per hour, and warn-class hardware XIDs (63, 92, 94, ...) per hour. Each signal has its own bucket
(``TrendRule.bucket_seconds``: 15 minutes for counter rates, an hour for sparse XIDs) and runs through a
one-sided CUSUM, ``S = max(0, S + (x - k) * bucket_hours)``, with the allowance
``k = max(floor, factor x the GPU's own median)`` so a GPU that always runs a little high stays quiet.
A trend is raised at the first bucket where ``S >= decision``, at least ``min_hours`` hours since the
run-up began were above ``k``, and the mean of the trailing hour is at least ``growth`` times the mean
of the hour after the run-up's first bucket (a rise, not a plateau or a burst); it *started* at the
first bucket of that run-up. Everything is causal: the bucket a trend is raised in only uses buckets up
to it, so a run at its end would have seen it. Buckets without readings (NULL) add nothing: unmeasured
is not zero, and a trend is never raised from missing data.
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
class TrendSignals:
    """Per-hour rates of every signal per bucket: ``values[name]`` has shape (GPUs, buckets), NaN where not measured."""

    gpus: tuple[str, ...]
    start: datetime
    buckets: int
    values: dict[str, np.ndarray]
    bucket_seconds: int = HOUR

    def bucket_start(self, i: int) -> datetime:
        return self.start + timedelta(seconds=i * self.bucket_seconds)

    def coarsen(self, bucket_seconds: int) -> TrendSignals:
        """The same rates in buckets of ``bucket_seconds`` (a multiple of ours): the mean of the measured ones."""
        if bucket_seconds == self.bucket_seconds:
            return self
        if bucket_seconds % self.bucket_seconds:
            raise ValueError(f"a {bucket_seconds} s bucket is not a multiple of {self.bucket_seconds} s")
        f = bucket_seconds // self.bucket_seconds
        n = -(-self.buckets // f)
        out = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a bucket with no reading stays NaN
            for name, x in self.values.items():
                padded = np.full((x.shape[0], n * f), np.nan)
                padded[:, : x.shape[1]] = x
                out[name] = np.nanmean(padded.reshape(x.shape[0], n, f), axis=2)
        return TrendSignals(self.gpus, self.start, n, out, bucket_seconds)


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
    """Rate in the last measured bucket of the window."""
    peak: float
    score: float
    """CUSUM sum at its highest in the window."""
    hours_above: float
    ended: datetime | None
    """When the sum fell back to 0 (None: still rising or high at the window end)."""

    def reason(self) -> str:
        what, unit = SIGNAL_WORDS[self.signal]
        latest = "not measured at the end" if self.latest is None else f"{self.latest:.4g}{unit} at the end"
        tail = f"; fell back at {self.ended:%Y-%m-%d %H:%M}" if self.ended else ""
        return (
            f"{what} rising since {self.started:%Y-%m-%d %H:%M} (seen {self.detected:%H:%M}): peak {self.peak:.4g}{unit}, "
            f"{latest}, {self.allowance:.4g}{unit} allowed, {self.hours_above:g} h above{tail}"
        )


def bucket_signals(con: duckdb.DuckDBPyConnection, window: Window, health: HealthRules) -> TrendSignals:
    """Per-hour rates of every GPU in ``an_dev`` over the window, in the finest bucket of the rules (aligned to
    the window start)."""
    rules = health.early_warning
    bucket = rules.finest_bucket_seconds()
    gpus = tuple(r[0] for r in con.execute("SELECT DISTINCT gpu_uuid FROM an_dev ORDER BY 1").fetchall())
    buckets = max(1, -(-int((window.end - window.start).total_seconds()) // bucket))
    index = {g: i for i, g in enumerate(gpus)}
    values = {name: np.full((len(gpus), buckets), np.nan) for name in rules.rules()}
    params = {"start": window.start, "end": window.end, "drop": rules.clock_drop_ratio,
              "power": rules.clock_drop_power_ratio, "bs": bucket}
    rows = con.execute(
        """
        WITH s AS (
            SELECT gpu_uuid, ts, floor((epoch(ts) - epoch($start::TIMESTAMP)) / $bs)::BIGINT AS h,
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
        if i is None or not 0 <= h < buckets:
            continue
        for name, v in zip(names, vals, strict=True):
            if v is not None:
                values[name][i, int(h)] = float(v)
    xids = values["hardware_xids_per_hour"]
    xids[:, :] = 0.0  # a bucket without an XID event is a measured zero: events are reported when they happen
    warn = sorted(health.warn_xids)
    for gpu, h, n in con.execute(
        """
        SELECT gpu_uuid, floor((epoch(ts) - epoch($start::TIMESTAMP)) / $bs)::BIGINT AS h, sum(count)
        FROM f_events WHERE kind = 'xid' AND ts >= $start AND ts < $end AND list_contains($warn, code)
        GROUP BY ALL
        """,
        {"start": window.start, "end": window.end, "warn": warn, "bs": bucket},
    ).fetchall():
        i = index.get(gpu)
        if i is not None and 0 <= h < buckets:
            xids[i, int(h)] = float(n) * HOUR / bucket
    return TrendSignals(gpus, window.start, buckets, values, bucket)


def detect(signals: TrendSignals, rules: EarlyWarningRules, *, until: datetime | None = None) -> list[Trend]:
    """Trends raised in buckets that end by ``until`` (all by default), at most one per GPU and signal."""
    out: list[Trend] = []
    for name, rule in rules.rules().items():
        coarse = signals.coarsen(rule.bucket_seconds)
        end = coarse.buckets
        if until is not None:
            end = min(end, max(0, int((until - coarse.start).total_seconds()) // coarse.bucket_seconds))
        out.extend(_cusum(coarse, name, rule, end))
    return sorted(out, key=lambda t: (t.gpu_uuid, t.detected, t.signal))


def _trailing_means(x: np.ndarray, n: int) -> np.ndarray:
    """Per bucket ``h``: the mean of the measured values in buckets ``h - n + 1 .. h`` (NaN where none)."""
    measured = ~np.isnan(x)
    sums = np.cumsum(np.where(measured, x, 0.0), axis=1)
    counts = np.cumsum(measured, axis=1)
    sums[:, n:] -= sums[:, :-n].copy()
    counts[:, n:] -= counts[:, :-n].copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _cusum(signals: TrendSignals, name: str, rule: TrendRule, end: int) -> list[Trend]:
    x = signals.values[name][:, :end]
    n_g = x.shape[0]
    if n_g == 0 or end == 0:
        return []
    dt_h = signals.bucket_seconds / HOUR
    per_hour = max(1, HOUR // signals.bucket_seconds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a GPU with no reading at all: median 0
        median = np.nan_to_num(np.nanmedian(x, axis=1), nan=0.0)
    k = np.maximum(rule.floor, rule.baseline_factor * median)
    s = np.zeros(n_g)
    run_start = np.full(n_g, -1)
    ref = np.full(n_g, np.nan)
    above = np.zeros(n_g, dtype=np.int64)
    raised = np.full(n_g, -1)
    started = np.full(n_g, -1)
    ended = np.full(n_g, -1)
    peak_s = np.zeros(n_g)
    trailing_all = _trailing_means(x, per_hour)
    for h in range(end):
        v = x[:, h]
        measured = ~np.isnan(v)
        nxt = np.where(measured, np.maximum(0.0, s + (np.nan_to_num(v) - k) * dt_h), s)
        rising = measured & (nxt > 0) & (s == 0)
        run_start = np.where(rising, h, run_start)
        above = np.where(rising, 0, above) + (measured & (np.nan_to_num(v) > k))
        s = nxt
        trailing = trailing_all[:, h]
        # the reference level: the hour after the run-up's first (possibly partial) bucket, once it is complete
        ref = np.where(rising, np.nan, np.where(h - run_start == per_hour, trailing, ref))
        grown = measured & ~np.isnan(ref) & (np.nan_to_num(trailing) >= rule.growth * np.nan_to_num(ref))
        fire = (raised < 0) & (s >= rule.decision) & (above * dt_h >= rule.min_hours) & grown
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
                gpu_uuid=signals.gpus[i], signal=name, started=signals.bucket_start(int(started[i])),
                detected=signals.bucket_start(int(raised[i]) + 1), allowance=float(k[i]), latest=latest,
                peak=float(np.nanmax(run)) if np.any(~np.isnan(run)) else 0.0, score=float(peak_s[i]),
                hours_above=float(np.sum(run > k[i])) * dt_h,
                ended=signals.bucket_start(int(ended[i])) if ended[i] >= 0 else None,
            )
        )
    return out


def counting(trends: list[Trend], window: Window, rules: EarlyWarningRules) -> list[Trend]:
    """Trends that still count at the window end: not fallen back, or fallen back within ``quiet_seconds``."""
    cutoff = window.end - timedelta(seconds=rules.quiet_seconds)
    return [t for t in trends if t.ended is None or t.ended >= cutoff]
