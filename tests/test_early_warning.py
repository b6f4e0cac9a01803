"""Early-warning trends on hand-built hourly series: rises are raised with their start, look-alikes are not."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulens.analytics.early_warning import HourlySignals, detect
from gpulens.analytics.settings import EarlyWarningRules

T0 = datetime(2026, 3, 1)
RULES = EarlyWarningRules()
NAMES = tuple(RULES.rules())


def signals(**series: list[float | None]) -> HourlySignals:
    """One GPU per keyword, all of them on the ECC signal; other signals unmeasured."""
    hours = max(len(v) for v in series.values())
    values = {n: np.full((len(series), hours), np.nan) for n in NAMES}
    for i, v in enumerate(series.values()):
        values["ecc_corrected_per_hour"][i, : len(v)] = [np.nan if x is None else x for x in v]
    return HourlySignals(tuple(series), T0, hours, values)


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
        assert sum(max(0.0, x - trend.allowance) for x in run) >= RULES.ecc_corrected_per_hour.decision - 1e-6
