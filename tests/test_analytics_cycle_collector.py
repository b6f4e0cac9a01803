"""``analyze`` pauses Python's cycle collector for the run and gives the caller back the collector as it was."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from collector.store_errors import StoreMissing


def _analyze_missing(tmp_path: Path) -> None:
    with pytest.raises(StoreMissing):
        analyze(tmp_path / "missing.duckdb", AnalysisSettings())


def test_a_failed_run_turns_the_collector_back_on(tmp_path: Path) -> None:
    assert gc.isenabled()
    _analyze_missing(tmp_path)
    assert gc.isenabled()


def test_a_caller_that_paused_the_collector_finds_it_paused(tmp_path: Path) -> None:
    gc.disable()
    try:
        _analyze_missing(tmp_path)
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_is_paused_while_the_run_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []

    def open_and_analyze(db_path: Path, settings: AnalysisSettings, *_: object) -> None:
        seen.append(gc.isenabled())
        raise StoreMissing(db_path)

    monkeypatch.setattr("analytics.run._open_and_analyze", open_and_analyze)
    _analyze_missing(tmp_path)
    assert seen == [False]
    assert gc.isenabled()
