"""Early-warning buckets are a day part: the window's trend signals do not depend on how its days were cut.

- the counter rates of a window read from its UTC-day parts equal the rates of the same samples read
  as one piece, and the rates the spec gives (a counter's rise since the GPU's previous bucket with
  readings, per hour between their last samples): across midnight, over gaps, NULL counters of older
  exporters, a lost GPU's samples and a window that starts mid-bucket;
- clock drops under load are judged against the same day's 95th-percentile clock and power, and only
  where the day has at least 12 hours of clock readings (else unmeasured);
- ``analyze`` raises the same trend, one that began before midnight and was raised after it, whether
  the window was analysed in one run or day by day (the first day's part reused).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics import health
from analytics.day_parts import day_windows
from analytics.early_warning import Trend, TrendSignals, trend_bucket_signals
from analytics.facts import Window
from analytics.result_tables import create_result_tables
from analytics.run import analyze
from analytics.settings import AnalysisSettings, EarlyWarningRules, HealthRules
from collector.schema import create_schema
from tests.support.analytics_fleet import Fleet

RULES = HealthRules()
QUARTER = 900
MIDNIGHT = datetime(2026, 1, 6)
Sample = tuple[datetime, str, bool, dict[str, float | None]]
"""A GPU sample: time, GPU, up, readings (None: not sent)."""
COUNTERS = {"ecc_corrected_total": "ecc_corrected_per_hour", "pcie_replay_total": "pcie_replays_per_hour",
            "nvlink_crc_errors_total": "nvlink_crc_per_hour", "thermal_violation_seconds_total": "thermal_seconds_per_hour"}


def facts(samples: list[Sample]) -> duckdb.DuckDBPyConnection:
    """An in-memory store holding these GPU samples (time, GPU, up, readings) as ``f_gpu_samples``."""
    con = duckdb.connect()
    create_schema(con)
    create_result_tables(con)
    for ts, gpu, up, readings in samples:
        cols = ", ".join(readings)
        con.execute(
            f"INSERT INTO gpu_samples (ts, node, gpu_uuid, up, source{', ' if cols else ''}{cols}) "  # noqa: S608 - test keys
            f"VALUES (?, 'n', ?, ?, 'test'{', ?' * len(readings)})",
            [ts, gpu, up, *readings.values()],
        )
    con.execute("CREATE VIEW f_gpu_samples AS SELECT * FROM gpu_samples")
    con.execute("CREATE VIEW f_events AS SELECT * FROM events")
    con.execute("CREATE TEMP TABLE an_dev AS SELECT DISTINCT gpu_uuid, 'n' AS node FROM gpu_samples")
    return con


def signals(con: duckdb.DuckDBPyConnection, window: Window, spans: list[Window], tag: str) -> TrendSignals:
    """The window's signals from parts computed over ``spans``."""
    ids = []
    for n, span in enumerate(spans):
        health.insert_part_health(con, f"{tag}{n}", span, RULES)
        ids.append(f"{tag}{n}")
    return trend_bucket_signals(con, window, RULES, ids)


def spec_rates(samples: list[Sample], window: Window, gpus: list[str],
               column: str) -> np.ndarray:
    """Per GPU and quarter hour (aligned to the epoch): the rise of ``column``'s maximum since the GPU's
    previous quarter hour with samples of an up GPU, per hour between the two quarter hours' last samples."""
    origin = int((window.start - datetime(1970, 1, 1)).total_seconds()) // QUARTER * QUARTER
    n = -(-int((window.end - datetime(1970, 1, 1)).total_seconds() - origin) // QUARTER)
    out = np.full((len(gpus), n), np.nan)
    for g, gpu in enumerate(gpus):
        last: dict[int, float] = {}
        top: dict[int, float | None] = {}
        for ts, who, up, readings in samples:
            at = (ts - datetime(1970, 1, 1)).total_seconds()
            if who != gpu or not up or not window.start <= ts < window.end:
                continue
            b = int(at - origin) // QUARTER
            last[b] = max(last.get(b, at), at)
            v = readings.get(column)
            top[b] = top.get(b) if v is None else max(v, top.get(b) or v)
        seen = sorted(last)
        for prev, b in zip(seen, seen[1:], strict=False):
            rise = None if top[b] is None or top[prev] is None else top[b] - top[prev]  # type: ignore[operator]
            if rise is not None and rise >= 0:
                out[g, b] = rise * 3600 / (last[b] - last[prev])
    return out


@st.composite
def traces(draw: st.DrawFn) -> tuple[Window, list[Sample]]:
    """Two GPUs over a few hours around midnight: bursty counters (quiet minutes, then jumps), gaps,
    counters an older exporter did not send (NULL), a lost GPU's samples, a window starting mid-bucket."""
    start = MIDNIGHT - timedelta(minutes=draw(st.integers(30, 300)))
    end = MIDNIGHT + timedelta(minutes=draw(st.integers(30, 300)))
    samples = []
    for gpu in ("GPU-A", "GPU-B"):
        totals = dict.fromkeys(COUNTERS, 0.0)
        missing = draw(st.sets(st.sampled_from(list(COUNTERS))))
        ts = start + timedelta(seconds=draw(st.integers(0, 120)))
        while ts < end:
            for c in totals:
                totals[c] += draw(st.sampled_from([0, 0, 0, 0, 0, 1, 7, 250]))
            up = draw(st.integers(0, 30)) > 0
            readings = {c: (None if c in missing else v) for c, v in totals.items()}
            samples.append((ts, gpu, up, readings))
            ts += timedelta(seconds=draw(st.sampled_from([60, 60, 60, 300, 1800, 3600])))
    return Window(start, end, 300), samples


@settings(max_examples=40, deadline=None)
@given(traces())
def test_counter_rates_from_day_parts_equal_the_rates_over_the_whole_window_and_the_spec(trace) -> None:  # type: ignore[no-untyped-def]
    window, samples = trace
    con = facts(samples)
    by_day = signals(con, window, day_windows(window), "day")
    whole = signals(con, window, [window], "whole")
    assert day_windows(window)[0].end == MIDNIGHT
    gpus = list(by_day.gpus)
    left_out = sorted({gpu for _, gpu, _, _ in samples} - set(gpus))
    assert whole.gpus == by_day.gpus
    for column, name in COUNTERS.items():
        np.testing.assert_array_equal(by_day.values[name], whole.values[name])
        np.testing.assert_allclose(by_day.values[name], spec_rates(samples, window, gpus, column), rtol=1e-9)
        quiet = spec_rates(samples, window, left_out, column)
        assert np.all(np.isnan(quiet) | (quiet == 0)), "only GPUs whose rates are all zero or unmeasured are left out"


def part_clock_drops(con: duckdb.DuckDBPyConnection) -> set[tuple[int, int | None]]:
    """Per stored day part: its samples with clock and power readings, and how many were clock drops."""
    return set(con.execute(
        "SELECT sum(clock_samples)::INT, sum(clock_drop_samples)::INT FROM (SELECT part_id, clock_samples, "
        "clock_drop_samples FROM part_trend_buckets UNION ALL SELECT part_id, clock_samples, clock_drop_samples "
        "FROM part_trend_quiet) GROUP BY part_id").fetchall())


def clocked(day_clock: dict[int, float], slow: range = range(0)) -> list[Sample]:
    """A GPU at full power every 5 minutes for two days, its SM clock per day; slow from ``slow``'s minutes of day 1."""
    out: list[Sample] = []
    for m in range(0, 2 * 1440, 5):
        day = m // 1440
        clock = 0.8e9 if day == 1 and m - 1440 in slow else day_clock[day]
        readings: dict[str, float | None] = {"sm_clock_hz": clock, "power_watts": 600.0}
        out.append((MIDNIGHT - timedelta(days=1) + timedelta(minutes=m), "GPU-C", True, readings))
    return out


def test_clock_drops_are_judged_against_the_same_days_95th_percentile() -> None:
    window = Window(MIDNIGHT - timedelta(days=1), MIDNIGHT + timedelta(days=1), 300)
    con = facts(clocked({0: 1.98e9, 1: 1.2e9}))
    slower_day = signals(con, window, day_windows(window), "p")
    assert part_clock_drops(con) == {(288, 0)}, "a day that runs slower all day is judged against its own clock"
    assert slower_day.gpus == (), "a GPU whose clock never dropped (and no counter moved) cannot raise a trend"
    dip = signals(facts(clocked({0: 1.98e9, 1: 1.98e9}, range(600, 720))), window, day_windows(window), "p")
    drops = dip.values["clock_drop_minutes_per_hour"][0]
    assert np.all(drops[96 + 40:96 + 48] == 60.0) and np.sum(drops > 0) == 8
    trend = Trend("GPU-C", "clock_drop_minutes_per_hour", MIDNIGHT, MIDNIGHT, 3.0, 60.0, 60.0, 90.0, 2.0, None)
    assert "below 70 % of the day's 95th-percentile clock while power is at least 50 % of the day's 95th percentile" \
        in trend.reason(RULES.early_warning)


def test_a_day_with_less_than_12_hours_of_clock_readings_has_its_clock_drops_unmeasured() -> None:
    """Today at 05:00: five hours of night, idle clocks at low power; its own 95th percentile of power is
    the night's, against which an idle GPU would look throttled under load."""
    night = [(MIDNIGHT + timedelta(minutes=m), "GPU-N", True,
              {"sm_clock_hz": 1.98e9 if m % 60 < 30 else 0.35e9, "power_watts": 90.0 + m % 7})
             for m in range(0, 300, 5)]
    today = Window(MIDNIGHT, MIDNIGHT + timedelta(hours=5), 300)
    con = facts(night)
    assert signals(con, today, day_windows(today), "p").gpus == ()
    assert part_clock_drops(con) == {(60, None)}, "clock readings counted, drops unmeasured (no reference)"
    short = HealthRules(early_warning=RULES.early_warning.model_copy(update={"clock_reference_seconds": 3600}))
    con = facts(night)
    health.insert_part_health(con, "p", today, short)
    judged = trend_bucket_signals(con, today, short, ["p"]).values["clock_drop_minutes_per_hour"]
    assert np.nanmax(judged) > 0, "against the night's own percentiles the idle halves count as drops"


def test_without_clock_readings_clock_drops_are_unmeasured_not_zero() -> None:
    window = Window(MIDNIGHT - timedelta(hours=2), MIDNIGHT + timedelta(hours=2), 300)
    power: dict[str, float | None] = {"power_watts": 600.0}
    samples = [(window.start + timedelta(minutes=m), "GPU-D", True, power) for m in range(240)]
    con = facts(samples)
    assert signals(con, window, day_windows(window), "p").gpus == ()
    assert part_clock_drops(con) == {(0, None)}, "no clock readings: no drops counted, none claimed"


def fleet(path: Path) -> None:
    """RISING: correctable ECC errors rising from 22:00 the day before ``MIDNIGHT`` (doubling every 40
    minutes, bursty); STEADY: a bursty but level rate. Samples every 5 minutes from a day before
    ``MIDNIGHT`` to 6 hours after it."""
    f = Fleet(path)
    f.node("a")
    start, steps = MIDNIGHT - timedelta(days=1), 30 * 12
    for gpu in ("RISING", "STEADY"):
        f.gpu(gpu, "a")
        f.samples(gpu, start=start, count=steps, every=300)
    rng = np.random.default_rng(5)
    totals = {"RISING": 0.0, "STEADY": 0.0}
    for step in range(steps):
        ts = start + timedelta(minutes=5 * step)
        hours = (ts - (MIDNIGHT - timedelta(hours=2))).total_seconds() / 3600
        rates = {"RISING": 0.0 if hours < 0 else 4.0 * 2 ** (1.5 * hours), "STEADY": 40.0}
        for gpu, rate in rates.items():
            totals[gpu] += rate / 12 * rng.uniform(0.2, 1.8)
            f.gpu_sample(gpu, ts, up=True, ecc_corrected_total=math.floor(totals[gpu]), power_watts=500.0)
    f.close()


def trends(path: Path, run_id: str) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(
            "SELECT gpu_uuid, state, trend_start_ts, warning_ts, evidence FROM health "
            "WHERE run_id = ? AND scope = 'gpu' ORDER BY gpu_uuid", [run_id],
        ).fetchall()


@pytest.mark.slow
def test_a_trend_across_midnight_is_the_same_in_one_run_and_day_by_day(tmp_path: Path) -> None:
    one, daily = tmp_path / "one.duckdb", tmp_path / "daily.duckdb"
    fleet(one)
    fleet(daily)
    window = {"window_seconds": 30 * 3600, "bucket_seconds": 3600, "end": MIDNIGHT + timedelta(hours=6)}
    whole = analyze(one, AnalysisSettings.model_validate(window))
    analyze(daily, AnalysisSettings.model_validate({**window, "window_seconds": 86400, "end": MIDNIGHT}))
    with duckdb.connect(str(daily), read_only=True) as con:
        (first_part,) = con.execute("SELECT part_id, created_at FROM analysis_parts").fetchall()
    by_day = analyze(daily, AnalysisSettings.model_validate(window))
    with duckdb.connect(str(daily), read_only=True) as con:
        listed = con.execute("SELECT part_id, created_at FROM analysis_parts ORDER BY part_start").fetchall()
    assert listed[0] == first_part, "the first day's part is reused, not computed again"

    assert trends(one, whole.run_id) == trends(daily, by_day.run_id)
    rising, steady = trends(one, whole.run_id)
    assert rising[:2] == ("RISING", "watch") and steady[1] == "ok"
    assert MIDNIGHT - timedelta(hours=2) <= rising[2] < MIDNIGHT < rising[3], "began before midnight, raised after"
    assert "correctable ECC errors rising since" in rising[4]


def test_a_finest_bucket_that_does_not_divide_a_day_is_refused() -> None:
    five_hours = {n: r.model_copy(update={"bucket_seconds": 5 * 3600}) for n, r in RULES.early_warning.rules().items()}
    with pytest.raises(ValueError, match="must divide a day"):
        EarlyWarningRules(**five_hours)
