"""Facts exported by the collector to Hive-partitioned Parquet give the same analysis as the store."""

from __future__ import annotations

from pathlib import Path

import duckdb

from gpulens.analytics.run import analyze
from gpulens.collector.parquet import export_parquet, read_fact_parquet
from tests.test_analytics_idle_capacity import build, settings


def test_the_parquet_path_gives_the_same_idle_capacity_and_chargeback(tmp_path: Path) -> None:
    store = tmp_path / "store.duckdb"
    build(store)
    from_store = analyze(store, settings())
    export_parquet(str(store), tmp_path / "export")
    con = duckdb.connect(str(store))
    for table in ("device_samples", "allocations", "gpu_samples", "events"):
        con.execute(f"DELETE FROM {table}")  # noqa: S608 - constant names: the facts now live only in Parquet
    con.close()
    from_parquet = analyze(store, settings(parquet_dir=tmp_path / "export"))
    assert from_parquet.run_id != from_store.run_id
    assert from_parquet.fact_source == str(tmp_path / "export")
    con = duckdb.connect(str(store), read_only=True)

    def idle(run_id: str) -> list[tuple]:
        return con.execute(
            """SELECT bucket_start, device_id, tenant, state, round(ge_hours, 9), round(cost_usd, 9)
               FROM idle_capacity WHERE run_id = ? ORDER BY ALL""",
            [run_id],
        ).fetchall()

    def bill(run_id: str) -> list[tuple]:
        return con.execute(
            'SELECT "SubAccountId", "x_CostState", "BilledCost" FROM chargeback WHERE run_id = ? ORDER BY ALL', [run_id]
        ).fetchall()

    assert idle(from_parquet.run_id) == idle(from_store.run_id) != []
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
