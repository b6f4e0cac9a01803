"""A new day costs a day: each UTC day of a window is a part computed once and shared by later runs.

On a simulated fleet (default scenario, 5-minute samples):
- the next day's analysis (the same 2-day window, one day later) computes one new part and reuses
  the other, and its rows equal those of an analysis of the same store from nothing;
- when a day's facts change, only that day is computed again, and a part no run lists is dropped;
- days analysed on separate workers (each its own store, facts in date-partitioned Parquet) and
  merged give the window's run without reading a fact again, with the single node's results.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.day_parts import Arrival, import_parts, import_parts_from
from analytics.result_tables import PART_TABLES
from analytics.run import analyze
from analytics.settings import AnalysisSettings
from collector.allocation_claims import add_sample_rows
from collector.backfill import backfill_simulated
from collector.parquet import export_parquet
from gpulens.core.errors import UserError

pytestmark = pytest.mark.slow

DAY = 86400
END = 1_790_000_000 - 1_790_000_000 % DAY  # a UTC midnight


def at(ts: int) -> datetime:
    return datetime.fromtimestamp(ts, UTC).replace(tzinfo=None)


def settings(end: int, **kw: object) -> AnalysisSettings:
    return AnalysisSettings.model_validate({"window_seconds": 2 * DAY, "bucket_seconds": 3600, "end": at(end), **kw})


@pytest.fixture(scope="module")
def three_days(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("parts") / "gpulens.duckdb"
    backfill_simulated(path, None, END - 2 * DAY, END + DAY, 300.0)
    return path


def rows(path: Path, sql: str, params: list[object]) -> list[tuple[object, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        return con.execute(sql, params).fetchall()


def parts(path: Path) -> dict[datetime, tuple[str, datetime]]:
    return {start: (pid, created) for pid, start, created in
            rows(path, "SELECT part_id, part_start, created_at FROM analysis_parts", [])}


def results(path: Path, run_id: str) -> tuple[list[tuple[object, ...]], ...]:
    """A run's rows, rounded (the run id and window columns left out)."""
    idle = rows(path, """SELECT bucket_start, device_id, tenant, state, round(ge_hours, 9), round(cost_usd, 9), samples
                         FROM idle_capacity WHERE run_id = ? ORDER BY ALL""", [run_id])
    frag = rows(path, """SELECT bucket_start, node, round(free_ge, 9), round(stranded_ge_hours, 9), reason
                         FROM fragmentation WHERE run_id = ? ORDER BY ALL""", [run_id])
    charge = rows(path, """SELECT "ChargePeriodStart", "SubAccountId", "x_CostState", "x_GpuModel", "BilledCost"
                           FROM chargeback WHERE run_id = ? ORDER BY ALL""", [run_id])
    risk = rows(path, "SELECT scope, gpu_uuid, tenant, score FROM isolation_risk WHERE run_id = ? ORDER BY ALL", [run_id])
    return idle, frag, charge, risk


def merged_results(base: Path, workers: list[Path], merged: Path, s: AnalysisSettings) -> tuple[list[tuple[object, ...]], ...]:
    """A copy of ``base`` takes the workers' day parts, then analyses the window without reading a day again."""
    shutil.copy(base, merged)
    copied: dict[str, tuple[int, float]] = {}
    for worker in workers:
        import_parts(merged, worker, copied)
    held = sum(rows(w, "SELECT count(*) FROM idle_capacity_parts", [])[0][0] for w in workers)
    assert copied["idle_capacity_parts"][0] == held > 0  # each table's copy is counted as it lands
    run = analyze(merged, s)
    assert run.phase_seconds.get("read samples and allocations") is None  # no day read its facts again
    return results(merged, run.run_id)


def from_nothing(path: Path, tmp: Path, s: AnalysisSettings) -> tuple[list[tuple[object, ...]], ...]:
    """The same analysis on a copy of the store without any stored part."""
    copy = tmp / "fresh.duckdb"
    shutil.copy(path, copy)
    with duckdb.connect(str(copy)) as con:
        for table in PART_TABLES:
            con.execute(f"DELETE FROM {table}")  # noqa: S608 - constant names
    assert not parts(copy)
    return results(copy, analyze(copy, s).run_id)


def test_the_next_day_computes_one_part_and_equals_an_analysis_from_nothing(three_days: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    shutil.copy(three_days, store)
    week = analyze(store, settings(END))
    first = parts(store)
    assert sorted(first) == [at(END - 2 * DAY), at(END - DAY)]
    nxt = analyze(store, settings(END + DAY))
    second = parts(store)
    assert sorted(second) == [at(END - 2 * DAY), at(END - DAY), at(END)]
    assert second[at(END - DAY)] == first[at(END - DAY)]  # the shared day: same part, not computed again
    assert results(store, nxt.run_id) == from_nothing(store, tmp_path, settings(END + DAY))
    assert results(store, week.run_id)[0]  # the earlier run still shows its rows
    shared = rows(store, "SELECT count(*) FROM idle_capacity_parts WHERE part_id = ?", [first[at(END - DAY)][0]])
    listed = rows(store, "SELECT count(*) FROM idle_capacity WHERE run_id IN (?, ?) AND bucket_start >= ? "
                         "AND bucket_start < ?", [week.run_id, nxt.run_id, at(END - DAY), at(END)])
    assert listed[0][0] == 2 * shared[0][0]  # both runs show the day's rows, stored once


def test_a_changed_day_alone_is_computed_again_and_its_old_part_dropped(three_days: Path, tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    shutil.copy(three_days, store)
    analyze(store, settings(END))
    before = parts(store)
    with duckdb.connect(str(store)) as con:  # a late allocation row for the first day
        add_sample_rows(
            con,
            """SELECT * REPLACE (ts + INTERVAL 1 SECOND AS ts, 'late-pod' AS pod)
               FROM allocations WHERE ts >= ? AND ts < ? LIMIT 1""",
            [at(END - 2 * DAY), at(END - DAY)],
        )
    again = analyze(store, settings(END))
    after = parts(store)
    assert after[at(END - DAY)] == before[at(END - DAY)]
    assert after[at(END - 2 * DAY)][0] != before[at(END - 2 * DAY)][0]
    assert len(after) == 2  # the replaced run's old part is listed by no run: dropped
    assert rows(store, "SELECT count(*) FROM idle_capacity_parts WHERE part_id = ?", [before[at(END - 2 * DAY)][0]]) \
        == [(0,)]
    assert results(store, again.run_id) == from_nothing(store, tmp_path, settings(END))


def test_days_analysed_on_separate_workers_merge_into_the_single_node_run(three_days: Path, tmp_path: Path) -> None:
    facts = tmp_path / "facts"
    export_parquet(str(three_days), facts)  # facts by date=YYYY-MM-DD, readable from any path DuckDB reads
    single = tmp_path / "single.duckdb"
    shutil.copy(three_days, single)
    whole = analyze(single, settings(END, parquet_dir=facts))
    workers = []
    for day in (END - DAY, END):  # each worker analyses one day of the window in its own store
        worker = tmp_path / f"worker-{day}.duckdb"
        shutil.copy(three_days, worker)
        analyze(worker, settings(day, parquet_dir=facts, window_seconds=DAY, sample_interval_seconds=300))
        workers.append(worker)
    merged = merged_results(three_days, workers, tmp_path / "merged.duckdb",
                            settings(END, parquet_dir=facts, sample_interval_seconds=300))
    assert merged == results(single, whole.run_id)


def test_the_command_merges_a_worker_store_and_refuses_a_foreign_file(three_days: Path, tmp_path: Path) -> None:
    worker = tmp_path / "worker.duckdb"
    shutil.copy(three_days, worker)
    analyze(worker, settings(END, window_seconds=DAY))
    central = tmp_path / "central.duckdb"
    shutil.copy(three_days, central)
    end = at(END).isoformat() + "Z"
    ok = gpulens("analyze", "--db", str(central), "--window", "2d", "--bucket", "1h", "--end", end,
                 "--parts-from", str(worker))
    assert ok.returncode == 0, ok.stderr
    assert "1 analysed day(s) copied from" in ok.stdout
    assert len(parts(central)) == 2
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a store")
    for bad, message in ((tmp_path / "missing.duckdb", "no such store"), (foreign, "--parts-from")):
        result = gpulens("analyze", "--db", str(central), "--parts-from", str(bad))
        assert result.returncode == 2
        assert result.stderr.startswith("gpulens: error: ") and message in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1


def test_an_import_killed_after_a_worker_keeps_that_workers_parts(three_days: Path, tmp_path: Path) -> None:
    """The store checkpoints once at the end of an import; a worker committed before a kill is in its log."""
    workers = []
    for day in (END - DAY, END):
        worker = tmp_path / f"worker-{day}.duckdb"
        shutil.copy(three_days, worker)
        analyze(worker, settings(day, window_seconds=DAY))
        workers.append(str(worker))
    central = tmp_path / "central.duckdb"
    shutil.copy(three_days, central)
    killed = subprocess.run(
        [sys.executable, "-c", "import os, sys\nfrom analytics.day_parts import import_parts_from\n"
         "for _ in import_parts_from(sys.argv[1], sys.argv[2:]):\n    os.kill(os.getpid(), 9)",
         str(central), *workers], capture_output=True, text=True, timeout=300, check=False)
    assert killed.returncode == -9, killed.stderr
    assert sorted(parts(central)) == [at(END - 2 * DAY)]  # the first worker's day, and only it
    first = rows(Path(workers[0]), "SELECT count(*) FROM idle_capacity_parts", [])
    assert rows(central, "SELECT count(*) FROM idle_capacity_parts", []) == first


def _one_day_worker(three_days: Path, tmp_path: Path) -> Path:
    worker = tmp_path / "worker.duckdb"
    shutil.copy(three_days, worker)
    analyze(worker, settings(END, window_seconds=DAY))
    return worker


def _taken_without_rows(three_days: Path, worker: Path, central: Path) -> list[Arrival]:
    """A merge that took the worker's parts and stopped before its run copied their idle and fragmentation rows."""
    shutil.copy(three_days, central)
    arrivals: list[Arrival] = []
    assert [n for _, n in import_parts_from(central, [worker], arrivals=arrivals)] == [1]
    return arrivals


def test_parts_whose_rows_never_arrived_are_not_stored_and_are_computed_again(three_days: Path, tmp_path: Path) -> None:
    worker = _one_day_worker(three_days, tmp_path)
    central = tmp_path / "central.duckdb"
    _taken_without_rows(three_days, worker, central)
    assert rows(central, "SELECT count(*) FROM idle_capacity_parts", []) == [(0,)]
    assert rows(central, "SELECT count(*) FROM analysis_part_arrivals", []) == [(1,)]
    run = analyze(central, settings(END, window_seconds=DAY))
    assert list(run.days_computed) == [at(END - DAY).date().isoformat()]  # from the facts, not half a part
    assert rows(central, "SELECT count(*) FROM analysis_part_arrivals", []) == [(0,)]
    assert results(central, run.run_id) == from_nothing(central, tmp_path, settings(END, window_seconds=DAY))


def test_parts_taken_again_after_a_stopped_merge_arrive_whole(three_days: Path, tmp_path: Path) -> None:
    worker = _one_day_worker(three_days, tmp_path)
    central = tmp_path / "central.duckdb"
    _taken_without_rows(three_days, worker, central)
    arrivals: list[Arrival] = []
    assert [n for _, n in import_parts_from(central, [worker], arrivals=arrivals)] == [1]  # taken again, whole
    copied: dict[str, tuple[int, float]] = {}
    run = analyze(central, settings(END, window_seconds=DAY), arrivals=arrivals, copied=copied)
    assert run.days_computed == {} and "rows from workers" in run.phase_seconds
    held = rows(worker, "SELECT count(*) FROM idle_capacity_parts", [])
    assert rows(central, "SELECT count(*) FROM idle_capacity_parts", []) == held
    assert copied["idle_capacity_parts"][0] == held[0][0]
    assert rows(central, "SELECT count(*) FROM analysis_part_arrivals", []) == [(0,)]
    assert results(central, run.run_id) == results(worker, rows(worker, "SELECT run_id FROM analysis_runs", [])[0][0])


def test_a_worker_store_gone_before_its_rows_arrive_stops_the_run_and_stores_nothing_half(
    three_days: Path, tmp_path: Path
) -> None:
    worker = _one_day_worker(three_days, tmp_path)
    central = tmp_path / "central.duckdb"
    arrivals = _taken_without_rows(three_days, worker, central)
    worker.unlink()
    with pytest.raises(UserError, match=r"--parts-from .*worker.duckdb: the rows of its analysed days could not be copied"):
        analyze(central, settings(END, window_seconds=DAY), arrivals=arrivals)
    assert rows(central, "SELECT count(*) FROM analysis_runs", []) == [(0,)]
    assert rows(central, "SELECT count(*) FROM analysis_part_arrivals", []) == [(1,)]  # still not stored


def gpulens(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpulens.cli", *args], capture_output=True, text=True, timeout=300, check=False)


def test_days_of_different_cadence_are_computed_with_the_window_interval(tmp_path: Path) -> None:
    """Day 1 sampled every 60 s, day 2 every 300 s: the window's interval is the median of the days'
    spacings (180 s), so the first day, computed while only its own spacing was known, is computed
    again; the result equals the analysis with that interval set."""
    from tests.support.analytics_fleet import Fleet

    day1 = datetime(2026, 1, 5)
    path = tmp_path / "cadence.duckdb"
    f = Fleet(path)
    f.node("n1")
    f.gpu("GPU-A", "n1")
    f.samples("GPU-A", start=day1, count=1440, every=60, activity=lambda i: 0.01 if i % 3 else 0.9)
    f.alloc("GPU-A", "alpha", start=day1, count=1440, every=60)
    f.samples("GPU-A", start=day1 + timedelta(days=1), count=288, every=300, activity=0.5)
    f.alloc("GPU-A", "alpha", start=day1 + timedelta(days=1), count=144, every=300)
    f.close()
    end = day1 + timedelta(days=2)
    inferred = AnalysisSettings(window_seconds=2 * DAY, bucket_seconds=3600, end=end)
    run = analyze(path, inferred)
    assert run.sample_interval_seconds == 180
    assert len(parts(path)) == 2  # the part computed with the first day's 60 s was dropped
    fixed = from_nothing(path, tmp_path, AnalysisSettings(window_seconds=2 * DAY, bucket_seconds=3600, end=end,
                                                            sample_interval_seconds=180))
    assert results(path, run.run_id) == fixed
