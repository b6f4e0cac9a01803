"""Facts exported by the collector to Hive-partitioned Parquet give the same analysis as the store."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.day_parts import trusted_tables
from analytics.run import analyze
from collector.parquet import export_parquet, read_fact_parquet
from collector.schema import STORED_AS_CLAIMS
from tests.support.analytics_fleet import T0, Fleet
from tests.test_analytics_idle_capacity import build, settings


def idle_rows(con: duckdb.DuckDBPyConnection, run_id: str) -> list[tuple]:
    """A run's ``idle_capacity`` rows, rounded, in order."""
    return con.execute(
        """SELECT bucket_start, device_id, tenant, state, round(ge_hours, 9), round(cost_usd, 9), samples
           FROM idle_capacity WHERE run_id = ? ORDER BY ALL""",
        [run_id],
    ).fetchall()


def test_the_parquet_path_gives_the_same_idle_capacity_and_chargeback(tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    build(store)
    from_store = analyze(store, settings())
    export_parquet(str(store), tmp_path / "export")
    con = duckdb.connect(str(store))
    for table in ("device_samples", "allocation_claims", "gpu_samples", "events"):
        con.execute(f"DELETE FROM {table}")  # noqa: S608 - constant names: the facts now live only in Parquet
    con.close()
    from_parquet = analyze(store, settings(parquet_dir=tmp_path / "export"))
    assert from_parquet.run_id != from_store.run_id
    assert from_parquet.fact_source == str(tmp_path / "export")
    con = duckdb.connect(str(store), read_only=True)

    def bill(run_id: str) -> list[tuple]:
        return con.execute(
            'SELECT "SubAccountId", "x_CostState", "BilledCost" FROM chargeback WHERE run_id = ? ORDER BY ALL', [run_id]
        ).fetchall()

    assert idle_rows(con, from_parquet.run_id) == idle_rows(con, from_store.run_id) != []
    assert bill(from_parquet.run_id) == bill(from_store.run_id)
    con.close()


def test_parquet_written_before_a_column_existed_reads_it_as_not_measured(tmp_path: Path) -> None:
    """An older export lacks columns added since (here the early-warning counters): the analysis runs,
    and those readings are NULL (not measured), never zero."""
    store = tmp_path / "store.duckdb"
    build(store)
    con = duckdb.connect(str(store))
    con.execute(
        """INSERT INTO gpu_samples (ts, node, gpu_uuid, up, power_watts, ecc_corrected_total, source)
           SELECT DISTINCT ts, node, gpu_uuid, true, 300.0, 0, 'test' FROM device_samples"""
    )
    con.close()
    export_parquet(str(store), tmp_path / "export")
    con = duckdb.connect()
    for old in (tmp_path / "export" / "gpu_samples").rglob("*.parquet"):
        con.execute(
            f"COPY (SELECT * EXCLUDE (ecc_corrected_total, pcie_replay_total) FROM read_parquet('{old}')) "  # noqa: S608
            f"TO '{old}.old' (FORMAT parquet)"
        )
        Path(f"{old}.old").replace(old)
    con.close()
    summary = analyze(store, settings(parquet_dir=tmp_path / "export"))
    assert summary.capacity_ge_hours > 0
    rel = read_fact_parquet(duckdb.connect(), tmp_path / "export" / "gpu_samples")
    assert rel is not None
    assert rel.aggregate("count(*), count(ecc_corrected_total), count(pcie_replay_total)").fetchall()[0][1:] == (0, 0)


@pytest.mark.parametrize("partition_offset_hours", [0, -5], ids=["utc-days", "local-days"])
def test_facts_across_midnight_give_the_store_s_analysis_however_the_days_are_partitioned(
    tmp_path: Path, partition_offset_hours: int
) -> None:
    """A day part reads only its own day's Parquet partition when the files' statistics show they hold
    only that UTC day's rows; files partitioned by a local date (here UTC-5: the first hours of each UTC
    day sit in the day before's partition) are read whole, so no row is lost either way."""
    store = tmp_path / "store.duckdb"
    start = T0 + timedelta(hours=21)  # 21:00 on one UTC day to 06:00 on the next
    f = Fleet(store)
    f.node("n1")
    f.gpu("GPU-A", "n1")
    f.gpu("GPU-B", "n1")
    f.samples("GPU-A", start=start, count=540, activity=lambda i: 0.0 if i % 7 else 0.9)
    f.alloc("GPU-A", "alpha", start=start, count=450)
    f.samples("GPU-B", start=start, count=540, activity=0.4)
    f.alloc("GPU-B", "beta", start=start + timedelta(hours=2), count=400)
    f.close()
    window = settings(window_seconds="1d", bucket_seconds="1h", end=T0 + timedelta(days=1, hours=6))
    from_store = analyze(store, window)
    out = tmp_path / "export"
    out.mkdir()
    con = duckdb.connect(str(store))
    for table in ("device_samples", "allocations"):
        con.execute(
            f"COPY (SELECT *, CAST(ts + INTERVAL ({partition_offset_hours}) HOUR AS DATE) AS day FROM {table}) "  # noqa: S608
            f"TO '{out / table}' (FORMAT parquet, PARTITION_BY (day))"
        )
        con.execute(f"DELETE FROM {STORED_AS_CLAIMS.get(table, table)}")  # noqa: S608 - the facts now live only in Parquet
    con.close()
    from_parquet = analyze(store, window.model_copy(update={"parquet_dir": out}))
    con = duckdb.connect(str(store), read_only=True)
    assert idle_rows(con, from_parquet.run_id) == idle_rows(con, from_store.run_id) != []
    assert {k: round(v, 9) for k, v in from_parquet.ge_hours_by_state.items()} == {
        k: round(v, 9) for k, v in from_store.ge_hours_by_state.items()}
    con.close()
    con = duckdb.connect(str(store))
    day_by_day = {"device_samples", "allocations"} if partition_offset_hours == 0 else set()
    assert trusted_tables(con, out) & {"device_samples", "allocations"} == day_by_day
    con.close()
