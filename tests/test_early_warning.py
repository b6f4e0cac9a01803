"""Early-warning trends on hand-built series: rises are raised with their start, look-alikes are not."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.early_warning import TrendSignals, detect
from analytics.settings import EarlyWarningRules

T0 = datetime(2026, 3, 1)
DEFAULT = EarlyWarningRules()
NAMES = tuple(DEFAULT.rules())
RULES = EarlyWarningRules(**{  # every signal hourly, 3 hours above: the algorithm at an hour's resolution
    n: r.model_copy(update={"bucket_seconds": 3600, "min_hours": 3}) for n, r in DEFAULT.rules().items()
})
QUARTER = 900


def signals(bucket_seconds: int = 3600, **series: list[float | None]) -> TrendSignals:
    """One GPU per keyword, all of them on the ECC signal (per-hour rates); other signals unmeasured."""
    n = max(len(v) for v in series.values())
    values = {name: np.full((len(series), n), np.nan) for name in NAMES}
    for i, v in enumerate(series.values()):
        values["ecc_corrected_per_hour"][i, : len(v)] = [np.nan if x is None else x for x in v]
    return TrendSignals(tuple(series), T0, n, values, bucket_seconds)


def degrading(lead_hours: float, *, onset_quarter: int = 40, start: float = 4.0, peak: float = 600.0,
              seed: int = 0) -> list[float | None]:
    """Quarter-hour correctable-ECC rates of a GPU that degrades for ``lead_hours`` from ``onset_quarter``
    (exponential growth with bursty 0.2-1.8x noise, as the simulator and real traces show), then fails."""
    rng = np.random.default_rng(seed)
    quiet = [float(x) for x in rng.choice([0.0, 0.0, 0.0, 4.0], onset_quarter)]
    n = int(lead_hours * 4)
    rise = [start * (peak / start) ** (q / n) * rng.uniform(0.2, 1.8) for q in range(n)]
    return [*quiet, *rise]


def test_a_rising_correctable_rate_is_raised_with_the_hour_the_rise_began() -> None:
    rising = [0.0] * 10 + [5, 9, 20, 45, 100, 220]
    (trend,) = detect(signals(RISING=rising), RULES)
    assert trend.gpu_uuid == "RISING" and trend.signal == "ecc_corrected_per_hour"
    assert trend.started == T0 + timedelta(hours=10)
    assert trend.started < trend.detected <= T0 + timedelta(hours=16)
    assert "correctable ECC errors rising since" in trend.reason()


def test_a_gpu_that_always_runs_high_a_one_hour_burst_and_a_plateau_stay_quiet() -> None:
    steady = [40.0, 35, 44, 38, 41, 39, 42, 37, 45, 40, 36, 43]
    burst = [0.0] * 5 + [500.0] + [0.0] * 6
    plateau = [0.0] * 4 + [30.0, 80, 80, 80, 80, 80, 80, 80]
    assert detect(signals(STEADY=steady, BURST=burst, PLATEAU=plateau), RULES) == []


def test_hours_without_readings_never_raise_a_trend() -> None:
    assert detect(signals(BLIND=[None] * 24), RULES) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(0, 5000)), min_size=4, max_size=30))
def test_a_trend_is_never_seen_before_the_hours_that_raise_it(series: list[float | None]) -> None:
    for trend in detect(signals(G=series), RULES):
        started = int((trend.started - T0).total_seconds() // 3600)
        seen = int((trend.detected - T0).total_seconds() // 3600)
        run = [x for x in series[started:seen] if x is not None]
        assert started < seen <= len(series)
        assert sum(1 for x in run if x > trend.allowance) >= RULES.ecc_corrected_per_hour.min_hours
        assert trend.hours_above >= RULES.ecc_corrected_per_hour.min_hours
        assert sum(max(0.0, x - trend.allowance) for x in run) >= RULES.ecc_corrected_per_hour.decision - 1e-6


def test_quarter_hour_buckets_raise_a_fast_degradation_before_it_fails_where_hourly_ones_did_not() -> None:
    for seed in range(5):
        series = degrading(2.5, seed=seed)
        failure = T0 + timedelta(seconds=len(series) * QUARTER)
        (fast,) = detect(signals(QUARTER, G=series), DEFAULT)
        assert fast.detected < failure, f"seed {seed}: seen {fast.detected}, fails {failure}"
        assert fast.started >= T0 + timedelta(seconds=40 * QUARTER)
        hourly = [t for t in detect(signals(QUARTER, G=series).coarsen(3600), RULES) if t.detected <= failure]
        assert hourly == [], "the old detector (hourly, 3 h above) saw it only at or after the failure"


def test_bursty_quarter_hours_at_a_steady_elevated_rate_stay_quiet() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        level = rng.uniform(10, 200)
        series = [float(level * rng.uniform(0.2, 1.8)) for _ in range(4 * 48)]
        assert detect(signals(QUARTER, G=series), DEFAULT) == []


def test_one_hot_quarter_hour_and_a_step_to_a_plateau_stay_quiet() -> None:
    spike = [0.0] * 60 + [2000.0] + [0.0] * 60
    step = [0.0] * 60 + [40.0] + [120.0] * 60
    assert detect(signals(QUARTER, SPIKE=spike, STEP=step), DEFAULT) == []


def test_a_trend_is_seen_at_the_end_of_its_quarter_hour_and_until_cuts_it_off() -> None:
    series = degrading(6.0, seed=3)
    (trend,) = detect(signals(QUARTER, G=series), DEFAULT)
    assert (trend.detected - T0).total_seconds() % QUARTER == 0
    assert detect(signals(QUARTER, G=series), DEFAULT, until=trend.detected - timedelta(seconds=QUARTER)) == []
    (cut,) = detect(signals(QUARTER, G=series), DEFAULT, until=trend.detected)
    assert (cut.started, cut.detected) == (trend.started, trend.detected)


def test_coarsening_averages_the_measured_quarter_hours_and_keeps_unmeasured_hours_unmeasured() -> None:
    hourly = signals(QUARTER, G=[10.0, None, 30.0, 20.0, None, None, None, None, 5.0]).coarsen(3600)
    assert hourly.trend_bucket_seconds == 3600 and hourly.trend_buckets == 3
    row = hourly.values["ecc_corrected_per_hour"][0]
    assert row[0] == 20.0 and np.isnan(row[1]) and row[2] == 5.0
