"""The default window ends at the last complete bucket of the data: never after the newest sample, never in the future.

A GPU sampled every minute from 00:00 to 03:16 (data ending mid-hour), analysed at 03:16 with 1 h buckets:
the window ends at 03:00, so no ``unknown`` time is counted for the 44 minutes that have not happened.
"""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from gpulens.core.errors import UserError
from tests.support.analytics_fleet import T0, Fleet

MINUTES = 3 * 60 + 17  # samples at 00:00 .. 03:16
NOW = (T0 + timedelta(minutes=MINUTES - 1, seconds=30)).replace(tzinfo=UTC)


def _store(path: Path, minutes: int = MINUTES) -> Path:
    f = Fleet(path)
    f.node("n1")
    f.gpu("GPU-A", "n1")
    f.samples("GPU-A", count=minutes, activity=0.5)
    f.alloc("GPU-A", "alpha", count=minutes)
    f.close()
    return path


def _settings() -> AnalysisSettings:
    return AnalysisSettings.model_validate({"window_seconds": "3h", "bucket_seconds": "1h"})


def test_default_window_ends_at_the_last_complete_bucket_and_counts_no_unknown_time_after_the_data(
    tmp_path: Path,
) -> None:
    db = _store(tmp_path / "s.duckdb")
    summary = analyze(db, _settings(), clock=lambda: NOW)
    assert summary.window_end == T0 + timedelta(hours=3)
    assert summary.window_start == T0
    assert summary.ge_hours_by_state.get("unknown", 0.0) == 0.0
    assert summary.ge_hours_by_state["allocated-active"] == pytest.approx(3.0)
    with duckdb.connect(str(db), read_only=True) as con:
        recorded = con.execute("SELECT window_start, window_end FROM analysis_runs").fetchall()
        latest_row = con.execute("SELECT max(bucket_start) FROM idle_capacity").fetchone()
        unknown_cost = con.execute(
            "SELECT count(*) FROM chargeback WHERE x_CostState = 'unknown'"
        ).fetchone()
    assert recorded == [(T0, T0 + timedelta(hours=3))]  # the run states the window it used
    assert latest_row == (T0 + timedelta(hours=2),)
    assert unknown_cost == (0,)


def test_default_window_never_ends_after_the_clock_even_when_samples_claim_a_later_time(tmp_path: Path) -> None:
    db = _store(tmp_path / "s.duckdb")
    summary = analyze(db, _settings(), clock=lambda: NOW - timedelta(hours=1))  # samples run an hour ahead
    assert summary.window_end == T0 + timedelta(hours=2)


def test_data_shorter_than_one_bucket_is_refused_in_words_instead_of_an_empty_window(tmp_path: Path) -> None:
    db = _store(tmp_path / "s.duckdb", minutes=20)
    with pytest.raises(UserError, match="no complete 60 min bucket"):
        analyze(db, _settings(), clock=lambda: T0 + timedelta(hours=1))


def test_an_explicit_end_is_still_rounded_up_to_a_whole_bucket(tmp_path: Path) -> None:
    db = _store(tmp_path / "s.duckdb")
    settings = AnalysisSettings.model_validate(
        {"window_seconds": "3h", "bucket_seconds": "1h", "end": T0 + timedelta(hours=2, minutes=10)}
    )
    assert analyze(db, settings, clock=lambda: NOW).window_end == T0 + timedelta(hours=3)


def test_the_newest_sample_stands_for_its_step_so_a_bucket_its_interval_completes_is_counted(tmp_path: Path) -> None:
    f = Fleet(tmp_path / "s.duckdb")
    f.node("n1")
    f.gpu("GPU-A", "n1")
    f.samples("GPU-A", count=36, every=300, activity=0.5)  # 00:00 .. 02:55 every 5 minutes: data to 03:00
    f.alloc("GPU-A", "alpha", count=36, every=300)
    f.close()
    summary = analyze(tmp_path / "s.duckdb", _settings(), clock=lambda: NOW)
    assert summary.window_end == T0 + timedelta(hours=3)
    assert summary.ge_hours_by_state["allocated-active"] == pytest.approx(3.0)
