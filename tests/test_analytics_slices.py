"""Days split between worker processes the way the Indexed Job splits them (`analyze --slice I/N`), merged
by the central store (`--parts-from FOLDER`), give the single node's rows, row for row.

Three simulated days at 15-minute samples, exported to date-partitioned Parquet: worker 0 analyses days
0 and 2, worker 1 day 1, both at once, each in a store that is a copy of the central one without facts.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

import duckdb
import pytest

from analytics.facts import Window
from analytics.run import analyze
from analytics.settings import AnalysisSettings
from analytics.slices import Slice, analyze_slice
from analytics.summary import AnalysisSummary
from collector.backfill import backfill_simulated
from collector.parquet import export_parquet
from gpulens.core.errors import UserError
from tests.support.cli import analyze_process as cli
from tests.support.cli import finished
from tests.test_analytics_day_parts import DAY, END, at, results, settings

pytestmark = pytest.mark.slow

END_ISO = at(END).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_two_workers_and_a_merge_give_the_single_node_rows(tmp_path: Path) -> None:
    store = tmp_path / "gpulens.duckdb"
    backfill_simulated(store, None, END - 3 * DAY, END, 900.0)
    facts = tmp_path / "facts"
    export_parquet(str(store), facts)
    config = tmp_path / "interval.yaml"
    config.write_text("sample_interval_seconds: 900\n", encoding="utf-8")
    single = tmp_path / "single.duckdb"
    shutil.copy(store, single)
    whole = analyze(single, settings(END, parquet_dir=facts, window_seconds=3 * DAY, sample_interval_seconds=900))

    workers = tmp_path / "workers"
    workers.mkdir()
    common = ("--parquet", facts, "--window", "3d", "--end", END_ISO, "--config", config, "--dimensions-from", store)
    outs = [finished(p) for p in [cli("--db", workers / f"worker-{i}.duckdb", "--slice", f"{i}/2", *common)
                                  for i in (0, 1)]]
    assert "slice 0/2: 2 day(s) analysed" in outs[0] and "slice 1/2: 1 day(s) analysed" in outs[1]

    central = tmp_path / "central.duckdb"
    shutil.copy(store, central)
    merged = finished(cli("--db", central, "--parquet", facts, "--window", "3d", "--end", END_ISO, "--config", config,
                          "--parts-from", workers / "*.duckdb"))  # as deploy/overlays/day-workers merges them
    assert "2 analysed day(s) copied from" in merged and "1 analysed day(s) copied from" in merged
    assert "days: 3 in the window, 3 reused, 0 computed" in merged
    with duckdb.connect(str(central), read_only=True) as con:
        run_id, summary = con.execute("SELECT run_id, summary FROM analysis_runs WHERE window_start = ?",
                                      [at(END - 3 * DAY)]).fetchone() or (None, None)
    assert "read samples and allocations" not in json.loads(summary)["phase_seconds"]  # no day read again
    assert results(central, run_id) == results(single, whole.run_id)
    assert results(single, whole.run_id)[0], "idle capacity rows to compare"


@pytest.mark.parametrize(("text", "days"), [("0/2", [0, 2, 4]), ("1/2", [1, 3]), ("4/5", [4]), ("3/7", [3])])
def test_a_slice_takes_every_countth_day_of_the_window(text: str, days: list[int]) -> None:
    window = Window(at(END - 5 * DAY), at(END), 3600)
    assert [(d.start - window.start).days for d in Slice.parse(text).days(window)] == days


@pytest.mark.parametrize(("text", "message"), [
    ("2/2", "--slice 2/2: the index must be 0 to 1 of 2 worker(s)"),
    ("0/0", "--slice 0/0: COUNT must be at least 1"),
    ("first", "--slice 'first' is not INDEX/COUNT, e.g. 0/7 (the first of 7 workers)"),
])
def test_a_bad_slice_is_named(text: str, message: str) -> None:
    with pytest.raises(UserError) as err:
        Slice.parse(text)
    assert str(err.value) == message


def test_a_slice_without_an_end_cuts_the_window_at_the_last_utc_midnight() -> None:
    seen: list[tuple[int, datetime | None]] = []

    def record(db: Path, s: AnalysisSettings) -> AnalysisSummary:
        seen.append((s.window_seconds, s.end))
        return cast(AnalysisSummary, None)

    noon = datetime(2026, 12, 2, 12, 30, tzinfo=UTC)
    analyze_slice(Path("w.duckdb"), AnalysisSettings.model_validate({"window_seconds": 3 * DAY}), Slice(1, 2),
                  record, lambda: noon)
    assert seen == [(DAY, datetime(2026, 12, 1))]  # the window: days 11-29, 11-30, 12-01; day 1 ends 12-01 00:00
    seen.clear()
    analyze_slice(Path("w.duckdb"), AnalysisSettings.model_validate({"window_seconds": 3 * DAY}), Slice(0, 2),
                  record, lambda: noon)
    assert seen == [(DAY, datetime(2026, 11, 30)), (DAY, datetime(2026, 12, 2))]


def test_a_worker_flag_without_a_slice_and_a_slice_with_parts_from_are_refused(tmp_path: Path) -> None:
    alone = cli("--db", tmp_path / "w.duckdb", "--dimensions-from", tmp_path / "central.duckdb")
    _, err = alone.communicate(timeout=120)
    assert (alone.returncode, err.strip()) == (2, "gpulens: error: --dimensions-from is for a worker: give --slice INDEX/COUNT too")
    both = cli("--db", tmp_path / "w.duckdb", "--slice", "0/2", "--parts-from", tmp_path)
    _, err = both.communicate(timeout=120)
    assert (both.returncode, err.strip()) == (
        2, "gpulens: error: --parts-from is for the central store, --slice for a worker: give one of them")


def test_a_pattern_that_matches_no_worker_store_yet_says_so(tmp_path: Path) -> None:
    run = cli("--db", tmp_path / "missing.duckdb", "--parts-from", tmp_path / "workers" / "*.duckdb")
    out, err = run.communicate(timeout=120)
    assert f"no store matches {tmp_path / 'workers' / '*.duckdb'} yet: no analysed day copied from there" in out
    assert run.returncode == 2 and err.startswith("gpulens: error: no store at")
