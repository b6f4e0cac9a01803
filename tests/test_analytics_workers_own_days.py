"""Days analysed on workers that hold only their own day: each worker has the dimensions and one day of
date-partitioned Parquet facts (nothing else), and the central store that merges their days gives the
single node's window results without reading a fact of those days again.

Each machine reads the facts from a path of its own (a day part is known by its files' names under
``--parquet`` and their content, not by where they are mounted): here each worker's folder holds only
its day, the central node's all of them."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from analytics.run import analyze
from collector.backfill import backfill_simulated
from collector.parquet import export_parquet
from collector.schema import FACT_STORAGE, FACTS
from tests.test_analytics_day_parts import DAY, END, at, merged_results, results, settings

pytestmark = pytest.mark.slow


def only_day(facts: Path, day_start: int, out: Path) -> Path:
    """A copy of ``facts`` holding only the partitions ``date=<day>`` of each fact table."""
    date = at(day_start).strftime("%Y-%m-%d")
    for table in FACTS:
        part = facts / table / f"date={date}"
        if part.is_dir():
            shutil.copytree(part, out / table / f"date={date}")
    assert any(out.rglob("*.parquet"))
    return out


def worker_store(store: Path, path: Path) -> Path:
    """The dimensions of ``store`` without any fact row: a worker reads its facts from its Parquet alone."""
    shutil.copy(store, path)
    with duckdb.connect(str(path)) as con:
        for table in FACT_STORAGE:
            con.execute(f"DELETE FROM {table}")  # noqa: S608 - names from the schema
    return path


def test_workers_holding_only_their_day_merge_into_the_single_node_run(tmp_path: Path) -> None:
    store = tmp_path / "gpulens.duckdb"
    backfill_simulated(store, None, END - 2 * DAY, END, 300.0)
    facts = tmp_path / "facts"
    export_parquet(str(store), facts)
    single = tmp_path / "single.duckdb"
    shutil.copy(store, single)
    whole = analyze(single, settings(END, parquet_dir=facts, sample_interval_seconds=300))

    workers = []
    for day_end in (END - DAY, END):
        own = only_day(facts, day_end - DAY, tmp_path / f"worker-{day_end}-facts")
        worker = worker_store(store, tmp_path / f"worker-{day_end}.duckdb")
        analyze(worker, settings(day_end, parquet_dir=own, window_seconds=DAY, sample_interval_seconds=300))
        workers.append(worker)

    central = tmp_path / "central-mount"
    shutil.copytree(facts, central)  # the same files (names, bytes) at another path
    merged_rows = merged_results(store, workers, tmp_path / "merged.duckdb",
                                 settings(END, parquet_dir=central, sample_interval_seconds=300))
    assert merged_rows[0] and merged_rows[2], "idle capacity and chargeback rows to compare"
    assert merged_rows == results(single, whole.run_id)
