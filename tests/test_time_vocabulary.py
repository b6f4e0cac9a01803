"""One duration grammar and one time grammar for every flag, config file and scenario.

A duration is a number of seconds or ``<number><unit>`` parts (ms, s, m, h, d, w); a time is ISO 8601
(UTC without an offset), Unix seconds or ``now`` +/- a duration. Each entry point below must accept and
refuse the same spellings; only a setting's own range differs (whole seconds for the analysed window,
positive for the exporter's interval).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from analytics.settings import AnalysisSettings
from exporter.settings import ExporterSettings
from gpulens.core.errors import UserError
from gpulens.core.timeparse import duration_seconds, parse_duration, parse_time, time_seconds
from gpulens.sim.scenario import DEFAULT_SCENARIO_PATH
from gpulens.sim.scenario_file import parse_scenario
from tests.support.cli import assert_one_line_error, gpulens

DEFAULT_SCENARIO = DEFAULT_SCENARIO_PATH.read_text(encoding="utf-8")


def scenario_step(text: str) -> float:
    return parse_scenario(DEFAULT_SCENARIO.replace("\nstep: 60s\n", f"\nstep: {text!r}\n"), origin="test").step


def scenario_epoch(text: str) -> float:
    scenario = parse_scenario(DEFAULT_SCENARIO.replace('\nepoch: "2026-01-01T00:00:00Z"\n', f"\nepoch: {text!r}\n"),
                              origin="test")
    return scenario.epoch_seconds


DURATION_ENTRY_POINTS: dict[str, Callable[[str], float]] = {
    "core grammar": duration_seconds,
    "a command's own flag (collect --interval, demo --step, remediate --breaker-window)":
        lambda text: parse_duration(text, what="--interval"),
    "analyze --window / window_seconds in --config": lambda text: AnalysisSettings(window_seconds=text, bucket_seconds="1s").window_seconds,
    "exporter --interval": lambda text: ExporterSettings(interval_seconds=text).interval_seconds,
    "scenario step": scenario_step,
}

ACCEPTED_DURATIONS = [("90", 90), ("15s", 15), ("5m", 300), ("1.5h", 5400), ("1h30m", 5400), ("1h 30m", 5400),
                      ("1d12h", 129600), ("2w", 1209600), (" 14d ", 1209600)]
REFUSED_DURATIONS = ["", "soon", "5x", "-5m", "1e3", "h", "5m5", "nan", "1h-30m", "two weeks"]


@pytest.mark.parametrize("entry", DURATION_ENTRY_POINTS)
@pytest.mark.parametrize(("text", "seconds"), ACCEPTED_DURATIONS)
def test_every_entry_point_accepts_the_same_duration_spellings(entry: str, text: str, seconds: float) -> None:
    assert DURATION_ENTRY_POINTS[entry](text) == seconds


@pytest.mark.parametrize("entry", DURATION_ENTRY_POINTS)
@pytest.mark.parametrize("text", REFUSED_DURATIONS)
def test_every_entry_point_refuses_the_same_duration_spellings(entry: str, text: str) -> None:
    with pytest.raises((ValueError, UserError)):  # pydantic's ValidationError is a ValueError
        DURATION_ENTRY_POINTS[entry](text)


def test_a_setting_keeps_its_own_range_over_the_one_grammar() -> None:
    assert ExporterSettings(interval_seconds="500ms").interval_seconds == 0.5
    with pytest.raises(ValidationError, match="whole seconds"):
        AnalysisSettings(window_seconds="500ms")
    with pytest.raises(UserError, match="must be positive"):
        parse_duration("0s", what="--interval")


NOW = 1_790_000_000.0


def settings_end(text: str) -> float:
    end = AnalysisSettings(end=text).end
    assert end is not None
    return end.timestamp()


TIME_ENTRY_POINTS: dict[str, Callable[[str], float]] = {
    "core grammar": time_seconds,
    "collect --start / --end": lambda text: parse_time(text, what="--end"),
    "analyze --end / end in --config": settings_end,
    "scenario epoch": scenario_epoch,
}

ACCEPTED_TIMES = [("2026-11-28T00:00:00Z", 1795824000.0), ("2026-11-28T00:00:00", 1795824000.0),
                  ("2026-11-28T01:00:00+01:00", 1795824000.0), ("1795824000", 1795824000.0)]
REFUSED_TIMES = ["", "yesterday", "nowish", "now-soon", "inf", "2026-13-01"]


@pytest.mark.parametrize("entry", TIME_ENTRY_POINTS)
@pytest.mark.parametrize(("text", "seconds"), ACCEPTED_TIMES)
def test_every_entry_point_accepts_the_same_time_spellings(entry: str, text: str, seconds: float) -> None:
    assert TIME_ENTRY_POINTS[entry](text) == seconds


@pytest.mark.parametrize("entry", TIME_ENTRY_POINTS)
@pytest.mark.parametrize("text", REFUSED_TIMES)
def test_every_entry_point_refuses_the_same_time_spellings(entry: str, text: str) -> None:
    with pytest.raises((ValueError, UserError)):
        TIME_ENTRY_POINTS[entry](text)


@pytest.mark.parametrize("entry", TIME_ENTRY_POINTS)
def test_now_minus_a_duration_is_a_time_at_every_entry_point(entry: str) -> None:
    before = time.time()
    seconds = TIME_ENTRY_POINTS[entry]("now-1h30m")
    assert before - 5400 <= seconds <= time.time() - 5400


def test_relative_times_follow_an_injected_clock() -> None:
    assert time_seconds("now-1h", clock=lambda: NOW) == NOW - 3600
    assert time_seconds("now+2w", clock=lambda: NOW) == NOW + 1209600
    assert datetime.fromtimestamp(time_seconds("now", clock=lambda: NOW), UTC).year == 2026


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("analyze", "--end", "yesterday"), ("--end: not a time", "Unix seconds")),
        (("analyze", "--window", "1h30x"), ("--window: not a duration",)),
        (("collect", "--simulate", "--end", "yesterday"), ("invalid --end 'yesterday'", "Unix seconds")),
        (("collect", "--simulate", "--step", "1h-30m"), ("invalid --step '1h-30m'", "1h30m")),
    ],
)
def test_a_bad_time_or_duration_is_one_line_naming_the_flag(tmp_path: Path, args: tuple[str, ...],
                                                            fragments: tuple[str, ...]) -> None:
    assert_one_line_error(gpulens(*args, "--db", str(tmp_path / "missing.duckdb")), *fragments)
