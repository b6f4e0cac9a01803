"""Facts exported by the collector to Hive-partitioned Parquet give the same analysis as the store."""

from __future__ import annotations

from pathlib import Path

import duckdb

from gpulens.analytics.run import analyze
from gpulens.collector.parquet import export_parquet
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
