"""A store from an older release gets the result columns added since, and keeps its rows."""

from __future__ import annotations

from pathlib import Path

import duckdb

from gpulens.analytics.result_tables import column_names, create_result_tables


def columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ? ORDER BY column_index",
        [table],
    ).fetchall()]


def test_a_result_table_without_a_newer_column_gets_it_and_keeps_its_rows(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "store.duckdb"))
    create_result_tables(con)
    con.execute("ALTER TABLE health DROP COLUMN gpu_uuid")
    con.execute("ALTER TABLE chargeback DROP COLUMN x_UnallocatedPolicy")
    con.execute("INSERT INTO health (run_id, window_start, window_end, scope, node, state, drain_candidate, evidence) "
                "SELECT 'r', TIMESTAMP '2026-03-02', TIMESTAMP '2026-03-03', 'node', 'n1', 'ok', false, '[]'")
    create_result_tables(con)
    assert set(columns(con, "health")) == set(column_names("health"))
    assert set(columns(con, "chargeback")) == set(column_names("chargeback"))
    assert con.execute("SELECT node, gpu_uuid, state FROM health").fetchall() == [("n1", None, "ok")]


def test_creating_the_result_tables_twice_changes_nothing(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "store.duckdb"))
    create_result_tables(con)
    before = {t: columns(con, t) for t in ("health", "isolation_risk", "chargeback", "placement")}
    create_result_tables(con)
    assert {t: columns(con, t) for t in before} == before
