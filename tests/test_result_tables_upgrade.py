"""A store from an older release gets the result columns added since, and keeps its rows."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import duckdb

from analytics import health
from analytics.facts import Window
from analytics.result_tables import PART_TABLES, column_names, create_result_tables
from analytics.settings import HealthRules
from collector.schema import create_schema


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


def test_a_day_part_table_without_a_newer_column_gets_it_at_its_end(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "store.duckdb"))
    create_result_tables(con)
    for name in ("remap_onset", "lost_at_last"):
        con.execute(f"ALTER TABLE part_health DROP COLUMN {name}")
    create_result_tables(con)
    expected = [c.name for c in PART_TABLES["part_health"]]
    assert sorted(columns(con, "part_health")) == sorted(expected)
    assert columns(con, "part_health")[-2:] == ["remap_onset", "lost_at_last"]
    create_schema(con)
    con.execute("INSERT INTO gpu_samples (node, source, ts, gpu_uuid, up, remapped_rows_failure) VALUES "
                "('n', 't', '2026-01-05 01:00', 'G', true, false), ('n', 't', '2026-01-05 02:00', 'G', true, true)")
    con.execute("CREATE VIEW f_gpu_samples AS SELECT * FROM gpu_samples")
    health.insert_part_health(con, "p", Window(datetime(2026, 1, 5), datetime(2026, 1, 6), 3600), HealthRules())
    assert con.execute("SELECT remap_ts, remap_onset, remap_at_first, lost_at_last FROM part_health").fetchall() == [
        (datetime(2026, 1, 5, 2), datetime(2026, 1, 5, 2), False, False)]
