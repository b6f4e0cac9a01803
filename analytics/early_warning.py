"""Early warning: per-GPU trends that precede hard failures, each with when it started and when it was seen.

Per GPU and time bucket: new correctable ECC errors, PCIe replays and NVLink CRC errors per hour,
thermal-violation seconds per hour, minutes of clock drop under load per hour (a sample below
``clock_drop_ratio`` of the day's 95th-percentile clock while drawing at least ``clock_drop_power_ratio``
of the day's 95th-percentile power), and warn-class hardware XIDs (63, 92, 94, ...) per hour. Each day
part stores, per GPU and finest bucket (aligned to the epoch, so a bucket never crosses midnight),
the last sample time, the counters' maxima and the clock-drop counts (``part_trend_buckets``, one read
of the day's ``f_gpu_samples`` per GPU and bucket, of only what the day's per-GPU pass ``an_gpu_day``
says it measured; two when it has clock readings); the window takes the rates between
consecutive buckets over the merged rows (across midnight) and counts XIDs from ``f_events``.

Each signal has its own bucket (``TrendRule.bucket_seconds``: 15 minutes for counter rates, an hour for
sparse XIDs) and runs through a one-sided CUSUM, ``S = max(0, S + (x - k) * bucket_hours)``, with the allowance
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

from analytics import gpu_day
from analytics.facts import Window
from analytics.settings import EarlyWarningRules, HealthRules, TrendRule

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
    trend_buckets: int
    values: dict[str, np.ndarray]
    trend_bucket_seconds: int = HOUR

    def trend_bucket_start(self, i: int) -> datetime:
        return self.start + timedelta(seconds=i * self.trend_bucket_seconds)

    def coarsen(self, trend_bucket_seconds: int) -> TrendSignals:
        """The same rates in trend buckets of ``trend_bucket_seconds`` (a multiple of ours): the mean of the
        measured ones."""
        if trend_bucket_seconds == self.trend_bucket_seconds:
            return self
        if trend_bucket_seconds % self.trend_bucket_seconds:
            raise ValueError(f"a {trend_bucket_seconds} s bucket is not a multiple of {self.trend_bucket_seconds} s")
        f = trend_bucket_seconds // self.trend_bucket_seconds
        n = -(-self.trend_buckets // f)
        out = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a bucket with no reading stays NaN
            for name, x in self.values.items():
                padded = np.full((x.shape[0], n * f), np.nan)
                padded[:, : x.shape[1]] = x
                out[name] = np.nanmean(padded.reshape(x.shape[0], n, f), axis=2)
        return TrendSignals(self.gpus, self.start, n, out, trend_bucket_seconds)


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

    def reason(self, rules: EarlyWarningRules | None = None) -> str:
        """The trend in words; with ``rules``, a clock-drop trend also says what counted as a drop."""
        what, unit = SIGNAL_WORDS[self.signal]
        if rules is not None and self.signal == "clock_drop_minutes_per_hour":
            what += (f" (below {rules.clock_drop_ratio * 100:g} % of the day's 95th-percentile clock while power is "
                     f"at least {rules.clock_drop_power_ratio * 100:g} % of the day's 95th percentile)")
        latest = "not measured at the end" if self.latest is None else f"{self.latest:.4g}{unit} at the end"
        tail = f"; fell back at {self.ended:%Y-%m-%d %H:%M}" if self.ended else ""
        return (
            f"{what} rising since {self.started:%Y-%m-%d %H:%M} (seen {self.detected:%H:%M}): peak {self.peak:.4g}{unit}, "
            f"{latest}, {self.allowance:.4g}{unit} allowed, {self.hours_above:g} h above{tail}"
        )


_CLOCK_REFERENCE = """
CREATE OR REPLACE TEMP TABLE an_clock_ref AS
SELECT gpu_uuid, quantile_cont(sm_clock_hz, 0.95) AS clk95, quantile_cont(power_watts, 0.95) AS pw95
FROM f_gpu_samples WHERE ts >= $start AND ts < $end AND up IS NOT FALSE
GROUP BY gpu_uuid
HAVING epoch(max(ts) FILTER (WHERE sm_clock_hz IS NOT NULL AND power_watts IS NOT NULL))
       - epoch(min(ts) FILTER (WHERE sm_clock_hz IS NOT NULL AND power_watts IS NOT NULL)) >= $cover
"""
"""Per GPU whose clock and power readings in the day part span at least ``clock_reference_seconds``: the
95th percentiles of its SM clock and power over the day (a GPU without one has its clock drops unmeasured)."""

PART_TRENDS_SELECT = """
SELECT $part_id AS part_id, gpu_uuid, make_timestamp(tb * $tb_us) AS bucket_start, last_ts, ecc AS ecc_corrected_max,
       pcie AS pcie_replay_max, crc AS nvlink_crc_max, thermal AS thermal_max, n_clk AS clock_samples,
       slow AS clock_drop_samples
FROM (
    SELECT s.gpu_uuid, epoch_us(s.ts) // $tb_us AS tb, max(s.ts) AS last_ts, {ecc} AS ecc, {pcie} AS pcie,
           {crc} AS crc, {thermal} AS thermal, {n_clk} AS n_clk, {slow} AS slow
    FROM f_gpu_samples s {join}
    WHERE s.ts >= $start AND s.ts < $end {up} {only}
    GROUP BY s.gpu_uuid, tb
)
"""
"""``part_trend_buckets`` rows of one day part: per GPU and bucket (aligned to the epoch), from samples of
an up GPU (``{only}``: of some GPUs only)."""

_MAXIMA = {"ecc": "max(s.ecc_corrected_total)", "pcie": "max(s.pcie_replay_total)",
           "crc": "max(s.nvlink_crc_errors_total)", "thermal": "max(s.thermal_violation_seconds_total)"}
_CLOCK_SAMPLES = "count(CASE WHEN s.power_watts IS NOT NULL THEN s.sm_clock_hz END)"
_SLOW = "count(CASE WHEN s.sm_clock_hz < $drop * r.clk95 AND s.power_watts >= $power * r.pw95 THEN 1 END)"


def part_trends_select(day: gpu_day.DaySeen, only: str = "") -> str:
    """``PART_TRENDS_SELECT`` for a day that measured ``day``: what the day never measured is not read per
    bucket (a counter never sent is NULL in every bucket, no SM clock reading counts no clock sample, a
    day without a lost GPU needs no ``up`` filter); the clock drops join the day's reference (``an_clock_ref``).
    ``only``: a further condition on the samples ``s``."""
    sent = {"ecc": day.ecc_corrected, "pcie": day.pcie_replay, "crc": day.nvlink_crc, "thermal": day.thermal}
    maxima = {k: sql if sent[k] else f"NULL::{'DOUBLE' if k == 'thermal' else 'BIGINT'}" for k, sql in _MAXIMA.items()}
    if day.sm_clock:
        clocks = {"n_clk": _CLOCK_SAMPLES, "slow": f"CASE WHEN any_value(r.gpu_uuid) IS NOT NULL THEN {_SLOW} END",
                  "join": "LEFT JOIN an_clock_ref r ON r.gpu_uuid = s.gpu_uuid"}
    else:  # no clock readings in the day: no reference to read
        clocks = {"n_clk": "0::BIGINT", "slow": "NULL::BIGINT", "join": ""}
    return PART_TRENDS_SELECT.format(**maxima, **clocks, up="AND s.up IS NOT FALSE" if day.lost else "",
                                     only=f"AND {only}" if only else "")


def insert_part_trends(con: duckdb.DuckDBPyConnection, part_id: str, window: Window, rules: EarlyWarningRules) -> None:
    """Write one day part's early-warning buckets: per GPU and bucket, the last time and the counter maxima
    (the window takes the rates between consecutive buckets, across midnight) and the clock drops under
    load against the day's 95th percentiles (read only when the day has clock readings). Reads
    ``an_gpu_day`` (``gpu_day.build`` for the same span) to know what the day measured.

    The buckets are summed up per GPU as they are made (``an_trend_gpus``): a GPU whose buckets are all quiet
    is stored as one ``part_trend_quiet`` row, and only the other GPUs' samples are read again for their
    bucket rows (none when every GPU was quiet)."""
    span = {"start": window.start, "end": window.end}
    params: dict[str, object] = {**span, "part_id": part_id, "tb_us": rules.finest_trend_bucket_seconds() * 1_000_000}
    day = gpu_day.seen(con)
    if day.sm_clock:
        con.execute(_CLOCK_REFERENCE, {**span, "cover": rules.clock_reference_seconds})
        params |= {"drop": rules.clock_drop_ratio, "power": rules.clock_drop_power_ratio}
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE an_trend_gpus AS {TREND_GPUS.format(buckets=part_trends_select(day))}",  # noqa: S608
                    params)
        con.execute(PART_TREND_GPUS, {"part_id": part_id})
        con.execute(PART_TREND_QUIET, {"part_id": part_id})
        busy = con.execute("SELECT count(*) FROM an_trend_gpus WHERE NOT quiet").fetchone()
        if busy and busy[0]:  # a semi join: as cheap for a few busy GPUs as a list, and for thousands far cheaper
            busy_only = "s.gpu_uuid IN (SELECT gpu_uuid FROM an_trend_gpus WHERE NOT quiet)"
            con.execute("INSERT INTO part_trend_buckets " + part_trends_select(day, busy_only), params)
    finally:
        con.execute("DROP TABLE IF EXISTS an_clock_ref")
        con.execute("DROP TABLE IF EXISTS an_trend_gpus")


TREND_GPUS = """
SELECT gpu_uuid,
       min(ecc_corrected_max) AS ecc_lo, max(ecc_corrected_max) AS ecc_hi, min(pcie_replay_max) AS pcie_lo,
       max(pcie_replay_max) AS pcie_hi, min(nvlink_crc_max) AS crc_lo, max(nvlink_crc_max) AS crc_hi,
       min(thermal_max) AS thermal_lo, max(thermal_max) AS thermal_hi, max(clock_drop_samples) AS drops,
       min(bucket_start) AS first_bucket, max(bucket_start) AS last_bucket,
       arg_min(last_ts, bucket_start) AS first_last_ts, max(last_ts) AS last_ts, sum(clock_samples) AS clock_samples,
       coalesce(count(*) = (epoch_us(max(bucket_start)) - epoch_us(min(bucket_start))) // $tb_us + 1
       AND (count(ecc_corrected_max) = 0 OR (count(ecc_corrected_max) = count(*) AND ecc_lo = ecc_hi))
       AND (count(pcie_replay_max) = 0 OR (count(pcie_replay_max) = count(*) AND pcie_lo = pcie_hi))
       AND (count(nvlink_crc_max) = 0 OR (count(nvlink_crc_max) = count(*) AND crc_lo = crc_hi))
       AND (count(thermal_max) = 0 OR (count(thermal_max) = count(*) AND thermal_lo = thermal_hi))
       AND (max(clock_samples) = 0 OR count(clock_drop_samples) = 0
            OR (min(clock_samples) > 0 AND count(clock_drop_samples) = count(*) AND drops = 0)), false) AS quiet
FROM ({buckets})
GROUP BY gpu_uuid
"""
"""Per GPU of one day part, over its buckets ``{buckets}``: the range of their counter maxima, their most clock
drops, and whether they are all **quiet**: a bucket at every step between its first and last, each counter
unmeasured in all of them or the same in all, and clock drops unmeasured in all of them (no clock reading, or
no reference) or measured as none in every one. A quiet GPU's rates inside the day are all zero or all
unmeasured, so the window rebuilds its buckets exactly from one row (``TREND_ROWS``). Most GPUs are quiet on
most days: a fleet stores a row per GPU and day for them instead of one per bucket."""

PART_TREND_GPUS = """
INSERT INTO part_trend_gpus
SELECT $part_id, gpu_uuid, ecc_lo, ecc_hi, pcie_lo, pcie_hi, crc_lo, crc_hi, thermal_lo, thermal_hi, drops
FROM an_trend_gpus
"""
"""Per GPU of one day part: the range of its buckets' counter maxima and its most clock drops, so the window
finds the GPUs whose counters moved from a row per GPU and day instead of every bucket."""

PART_TREND_QUIET = """
INSERT INTO part_trend_quiet
SELECT $part_id, gpu_uuid, first_bucket, last_bucket, first_last_ts, last_ts, ecc_lo, pcie_lo, crc_lo, thermal_lo,
       clock_samples, drops
FROM an_trend_gpus WHERE quiet
"""
"""The quiet GPUs of one day part, a row each (their counters are the same in every bucket)."""

TREND_ROWS = """
SELECT gpu_uuid, bucket_start, last_ts, ecc_corrected_max, pcie_replay_max, nvlink_crc_max, thermal_max,
       CASE WHEN clock_samples > 0 THEN 60.0 * clock_drop_samples / clock_samples END AS clock_drop_minutes
FROM part_trend_buckets WHERE list_contains($parts, part_id) AND list_contains($gpus, gpu_uuid)
UNION ALL
SELECT gpu_uuid, b.bucket_start,
       CASE b.bucket_start WHEN first_bucket THEN first_last_ts WHEN last_bucket THEN last_ts ELSE b.bucket_start END,
       ecc_corrected_max, pcie_replay_max, nvlink_crc_max, thermal_max,
       CASE WHEN clock_samples > 0 THEN 60.0 * clock_drop_samples / clock_samples END  -- 0 or NULL in every bucket
FROM part_trend_quiet,
     LATERAL (SELECT unnest(generate_series(first_bucket, last_bucket, to_microseconds($tb_us))) AS bucket_start) b
WHERE list_contains($parts, part_id) AND list_contains($gpus, gpu_uuid)
"""
"""Early-warning buckets of the GPUs ``$gpus`` in the day parts ``$parts``: the stored ones, and those of quiet
GPUs rebuilt (a middle bucket's last sample read as its start: its rate is a zero rise, or unmeasured, either
way; the first and last keep their own, which rates across midnight need). Clock drops come as minutes per hour."""


_EPOCH = datetime(1970, 1, 1)
_COUNTERS = ("ecc_corrected_per_hour", "pcie_replays_per_hour", "nvlink_crc_per_hour", "thermal_seconds_per_hour")


def trend_bucket_signals(con: duckdb.DuckDBPyConnection, window: Window, health: HealthRules,
                   parts: list[str]) -> TrendSignals:
    """Per-hour rates over the window, in the finest trend bucket of the rules (aligned to the epoch), from the
    early-warning buckets of the window's day parts ``parts``: a counter's rate is its rise since the GPU's
    previous bucket with readings (the day before's last, across midnight).

    Only GPUs of ``an_dev`` that can raise a trend are read: a counter moved, a clock dropped under load
    or a warn-class XID came in the window. Every rate of any other GPU is zero or unmeasured, never above
    an allowance, so it raises nothing.
    """
    rules = health.early_warning
    trend_bucket = rules.finest_trend_bucket_seconds()
    origin = int((window.start - _EPOCH).total_seconds()) // trend_bucket * trend_bucket
    start = _EPOCH + timedelta(seconds=origin)
    trend_buckets = max(1, -(-int((window.end - start).total_seconds()) // trend_bucket))
    span = {"parts": parts, "start": start, "end": window.end}
    events = {"start": window.start, "end": window.end, "warn": sorted(health.warn_xids)}
    gpus = tuple(r[0] for r in con.execute(
        """
        SELECT gpu_uuid FROM part_trend_gpus  -- the parts' buckets all lie in the window
        WHERE list_contains($parts, part_id)
        GROUP BY gpu_uuid
        HAVING max(ecc_corrected_hi) > min(ecc_corrected_lo) OR max(pcie_replay_hi) > min(pcie_replay_lo)
            OR max(nvlink_crc_hi) > min(nvlink_crc_lo) OR max(thermal_hi) > min(thermal_lo)
            OR max(clock_drop_samples) > 0
        INTERSECT SELECT gpu_uuid FROM an_dev
        UNION SELECT gpu_uuid FROM f_events
        WHERE kind = 'xid' AND ts >= $xstart AND ts < $xend AND list_contains($warn, code)
              AND gpu_uuid IN (SELECT gpu_uuid FROM an_dev)
        ORDER BY 1
        """,
        {"parts": parts, "xstart": events["start"], "xend": events["end"], "warn": events["warn"]},
    ).fetchall())
    values = {name: np.full((len(gpus), trend_buckets), np.nan) for name in rules.rules()}
    rows = con.execute(
        f"""
        SELECT t.gpu_uuid, (epoch_us(t.bucket_start) // 1000000 - $origin) // $bs AS h, epoch_us(t.last_ts) AS ts,
               t.ecc_corrected_max, t.pcie_replay_max, t.nvlink_crc_max, t.thermal_max, t.clock_drop_minutes AS slow
        FROM ({TREND_ROWS}) t
        WHERE t.bucket_start >= $start AND t.bucket_start < $end
        """,  # noqa: S608 - a constant; the GPUs are a filter on the scans, not a join (the few GPUs' rows of millions)
        {**span, "origin": origin, "bs": trend_bucket, "gpus": list(gpus), "tb_us": trend_bucket * 1_000_000},
    ).fetchnumpy()
    index = {g: n for n, g in enumerate(gpus)}
    cols: list[np.ndarray] = [np.ma.filled(np.ma.asarray(rows[k], dtype=float), np.nan) for k in list(rows)[2:]]
    cols[0] /= 1e6  # microseconds -> seconds
    at = np.fromiter(map(index.__getitem__, rows["gpu_uuid"]), dtype=np.int64, count=len(rows["gpu_uuid"]))
    _rates(values, (len(gpus), trend_buckets), at, np.asarray(rows["h"], dtype=np.int64), cols)
    xids = values["hardware_xids_per_hour"]
    xids[:, :] = 0.0  # a bucket without an XID event is a measured zero: events are reported when they happen
    for gpu, b, n in con.execute(
        """
        SELECT gpu_uuid, ((epoch(ts) - $origin) // $bs)::BIGINT AS h, sum(count)
        FROM f_events WHERE kind = 'xid' AND ts >= $start AND ts < $end AND list_contains($warn, code)
        GROUP BY ALL
        """,
        {**events, "origin": origin, "bs": trend_bucket},
    ).fetchall():
        row = index.get(gpu)
        if row is not None and 0 <= b < trend_buckets:
            xids[row, int(b)] = float(n) * HOUR / trend_bucket
    return TrendSignals(gpus, start, trend_buckets, values, trend_bucket)


def _rates(values: dict[str, np.ndarray], shape: tuple[int, int], i: np.ndarray, h: np.ndarray,
           cols: list[np.ndarray]) -> None:
    """Fill the rates from per-bucket rows (GPU ``i``, bucket ``h``; last time in seconds, counter maxima,
    clock-drop minutes per hour): a counter's rate is its rise since the GPU's previous bucket with a row,
    per hour of the time between their last samples (NaN where either maximum is unmeasured or the
    counter fell)."""
    keep = (h >= 0) & (h < shape[1])
    i, h = i[keep], h[keep]
    cols = [c[keep] for c in cols]
    at = np.full(shape, -1, dtype=np.int64)
    at[i, h] = np.arange(len(i))
    order = at[at >= 0]  # the rows by GPU, then bucket
    i, h = i[order], h[order]
    ts, *counters, slow = (c[order] for c in cols)
    follows = np.zeros(len(order), dtype=bool)
    follows[1:] = i[1:] == i[:-1]

    def rise(v: np.ndarray) -> np.ndarray:
        out = np.full(len(v), np.nan)
        out[1:] = v[1:] - v[:-1]
        return out

    def dense(v: np.ndarray) -> np.ndarray:
        out = np.full(shape, np.nan)
        out[i, h] = v
        return out

    dt = rise(ts)
    with np.errstate(invalid="ignore", divide="ignore"):
        for name, v in zip(_COUNTERS, counters, strict=True):
            if np.isnan(v).all():  # a counter no exporter sent: unmeasured throughout
                values[name] = np.full(shape, np.nan)
                continue
            d = rise(v)
            values[name] = dense(np.where(follows & (d >= 0) & (dt > 0), d * HOUR / dt, np.nan))
    values["clock_drop_minutes_per_hour"] = dense(slow)


def detect(signals: TrendSignals, rules: EarlyWarningRules, *, until: datetime | None = None) -> list[Trend]:
    """Trends raised in buckets that end by ``until`` (all by default), at most one per GPU and signal."""
    out: list[Trend] = []
    for name, rule in rules.rules().items():
        coarse = signals.coarsen(rule.bucket_seconds)
        end = coarse.trend_buckets
        if until is not None:
            end = min(end, max(0, int((until - coarse.start).total_seconds()) // coarse.trend_bucket_seconds))
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
    dt_h = signals.trend_bucket_seconds / HOUR
    per_hour = max(1, HOUR // signals.trend_bucket_seconds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a GPU with no reading at all: median 0
        median = np.nan_to_num(np.nanmedian(x, axis=1), nan=0.0)
    k = np.maximum(rule.floor, rule.baseline_factor * median)
    # the sum never exceeds the total excess over k: only GPUs whose total reaches the decision can raise
    with np.errstate(invalid="ignore"):
        excess = np.nansum(np.maximum(0.0, x - k[:, None]), axis=1) * dt_h
    rows = np.nonzero(excess >= rule.decision * (1 - 1e-9))[0]
    if len(rows) == 0:
        return []
    x, k, gpus, n_g = x[rows], k[rows], [signals.gpus[r] for r in rows], len(rows)
    x0, measured_all = np.nan_to_num(x), ~np.isnan(x)
    s = np.zeros(n_g)
    run_start = np.full(n_g, -1)
    ref = np.full(n_g, np.nan)
    above = np.zeros(n_g, dtype=np.int64)
    raised = np.full(n_g, -1)
    started = np.full(n_g, -1)
    ended = np.full(n_g, -1)
    peak_s = np.zeros(n_g)
    trailing_all = _trailing_means(x, per_hour)
    trailing0 = np.nan_to_num(trailing_all)
    for h in range(end):
        v, measured = x0[:, h], measured_all[:, h]
        nxt = np.where(measured, np.maximum(0.0, s + (v - k) * dt_h), s)
        rising = measured & (nxt > 0) & (s == 0)
        run_start = np.where(rising, h, run_start)
        above = np.where(rising, 0, above) + (measured & (v > k))
        s = nxt
        trailing = trailing_all[:, h]
        # the reference level: the hour after the run-up's first (possibly partial) bucket, once it is complete
        ref = np.where(rising, np.nan, np.where(h - run_start == per_hour, trailing, ref))
        grown = measured & ~np.isnan(ref) & (trailing0[:, h] >= rule.growth * np.nan_to_num(ref))
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
                gpu_uuid=gpus[i], signal=name, started=signals.trend_bucket_start(int(started[i])),
                detected=signals.trend_bucket_start(int(raised[i]) + 1), allowance=float(k[i]), latest=latest,
                peak=float(np.nanmax(run)) if np.any(~np.isnan(run)) else 0.0, score=float(peak_s[i]),
                hours_above=float(np.sum(run > k[i])) * dt_h,
                ended=signals.trend_bucket_start(int(ended[i])) if ended[i] >= 0 else None,
            )
        )
    return out


def counting(trends: list[Trend], window: Window, rules: EarlyWarningRules) -> list[Trend]:
    """Trends that still count at the window end: not fallen back, or fallen back within ``quiet_seconds``."""
    cutoff = window.end - timedelta(seconds=rules.quiet_seconds)
    return [t for t in trends if t.ended is None or t.ended >= cutoff]
