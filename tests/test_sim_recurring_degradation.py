"""A degradation with ``every`` degrades and fails again each cycle, so any window of a day shows one."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from gpulens.sim.precursors import RecurringTrend, Trend, trend_of
from gpulens.sim.scenario import FaultSpec

DAY, HOUR = 86400.0, 3600.0


def fault(**extra: object) -> FaultSpec:
    base = {"kind": "degradation", "node": "n", "gpu": 0, "at": "10h", "fail_after": "9h", "precursor": "ecc"}
    return FaultSpec.model_validate({**base, **extra})


def test_each_cycle_is_the_one_shot_degradation_shifted_by_every() -> None:
    recurring = trend_of(fault(every="1d"), seed=3)
    assert isinstance(recurring, RecurringTrend)
    one_shot = Trend(fault(), seed=3)
    first_day = np.arange(0, DAY, 300.0)
    assert np.array_equal(recurring.counter(first_day), one_shot.counter(first_day))
    third = np.arange(2 * DAY + 10 * HOUR, 2 * DAY + 19 * HOUR, 300.0)
    rise = recurring.counter(third) - recurring.counter(np.array([2 * DAY + 10 * HOUR - 1]))
    assert rise[-1] > 100, "the third cycle rises again"
    failures = [t for t, code in recurring.events_until(3 * DAY) if code == 48]
    assert failures == [10 * HOUR + 9 * HOUR + n * DAY for n in range(3)]


def test_counters_never_go_down_whatever_the_slice_of_time_evaluated() -> None:
    recurring = trend_of(fault(every="1d", precursor="pcie"), seed=1)
    whole = recurring.counter(np.arange(0, 6 * DAY, 300.0))
    assert np.all(np.diff(whole) >= 0)
    late = np.arange(4 * DAY, 6 * DAY, 300.0)
    assert np.array_equal(recurring.counter(late), whole[-len(late):]), "a chunk alone gives the same counts"


def test_failures_add_up_and_the_failed_state_lasts_until_the_next_cycle() -> None:
    recurring = trend_of(fault(every="1d"), seed=1)
    at = np.array([0.0, 19 * HOUR - 1, 19 * HOUR, DAY + 9 * HOUR, DAY + 10 * HOUR, 3 * DAY + 20 * HOUR])
    assert list(recurring.failures(at)) == [0, 0, 1, 1, 1, 4]
    assert list(recurring.failed(at)) == [False, False, True, True, False, True]


@pytest.mark.parametrize(
    ("extra", "words"),
    [({"every": "1d", "fail_after": None}, "needs fail_after"), ({"every": "9h"}, "longer than fail_after"),
     ({"kind": "lookalike", "fail_after": None, "every": "1d"}, "lookalike happens once")],
)
def test_a_recurring_degradation_must_fail_each_cycle_before_the_next(extra: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        fault(**extra)
