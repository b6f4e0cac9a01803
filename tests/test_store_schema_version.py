"""A store from a newer or unknown schema version is refused, unchanged, with one line; an older store is
migrated and each change is said, never done silently."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import duckdb
import pytest

from analytics.result_tables import create_result_tables
from collector.schema import SCHEMA_VERSION, create_schema
from collector.schema_version import StoreVersionUnsupported
from collector.store import Store
from tests.support.cli import assert_one_line_error, gpulens
from tests.support.report_store import build_store


@pytest.fixture(scope="module")
def current(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("version") / "current.duckdb", with_results=False)


def _with_version(current: Path, tmp_path: Path, version: str) -> Path:
    db = tmp_path / f"v{version}.duckdb"
    shutil.copy(current, db)
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE schema_info SET value = ? WHERE key = 'schema_version'", [version])
    return db


def _marker(db: Path) -> str:
    with duckdb.connect(str(db), read_only=True) as con:
        row = con.execute("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchone()
    assert row is not None
    return str(row[0])


COMMANDS = {
    "collect": ["collect", "--scrape", "http://127.0.0.1:9/metrics", "--once", "--timeout", "1s"],
    "analyze": ["analyze", "--window", "6h"],
    "report": ["report", "--out", "{tmp}/report"],
    "export-parquet": ["export-parquet", "--out", "{tmp}/parquet"],
    "recommend --no-store": ["recommend", "--no-store", "--out", "{tmp}/rec"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_store_from_a_newer_schema_version_is_refused_with_one_line_and_left_unchanged(
    current: Path, tmp_path: Path, command: str
) -> None:
    db = _with_version(current, tmp_path, "999")
    proc = gpulens(*(a.format(tmp=tmp_path) for a in COMMANDS[command]), "--db", str(db), timeout=120)
    assert_one_line_error(proc, f"the store {db} has schema version 999",
                          f"supports schema version {SCHEMA_VERSION} and older", "upgrade gpulens")
    assert _marker(db) == "999"


def test_a_store_whose_version_is_not_a_version_is_refused_by_name(current: Path, tmp_path: Path) -> None:
    db = _with_version(current, tmp_path, "two")
    with pytest.raises(StoreVersionUnsupported, match="an unknown schema version 'two'"):
        Store(str(db))
    assert _marker(db) == "two"


def test_the_writer_refuses_a_newer_store_before_writing_its_marker(current: Path, tmp_path: Path) -> None:
    db = _with_version(current, tmp_path, str(SCHEMA_VERSION + 1))
    with pytest.raises(StoreVersionUnsupported):
        Store(str(db))
    assert _marker(db) == str(SCHEMA_VERSION + 1)


def _older(current: Path, tmp_path: Path) -> Path:
    """The store as an older gpulens left it: no ``activity_signal``, ``pending_demand.quantity NOT NULL``."""
    db = tmp_path / "older.duckdb"
    shutil.copy(current, db)
    with duckdb.connect(str(db)) as con:
        con.execute("ALTER TABLE device_samples DROP COLUMN activity_signal")
        con.execute("DELETE FROM pending_demand WHERE quantity IS NULL")
        con.execute("ALTER TABLE pending_demand ALTER COLUMN quantity SET NOT NULL")
    return db


def test_an_older_store_is_migrated_and_each_change_is_said(current: Path, tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    db = _older(current, tmp_path)
    rows = duckdb.connect(str(db), read_only=True).execute("SELECT count(*) FROM device_samples").fetchone()
    with caplog.at_level(logging.INFO, logger="gpulens.store"), duckdb.connect(str(db)) as con:
        changes = create_schema(con, str(db))
        again = create_schema(con, str(db))
        kept = con.execute("SELECT count(*), count(activity_signal) FROM device_samples").fetchone()
    assert len(changes) == 2 and any("activity_signal" in c for c in changes)
    assert any("pending_demand.quantity" in c for c in changes)
    assert again == []  # a current store: nothing to say
    assert kept == (rows[0] if rows else None, 0)  # rows kept; the new column unmeasured (NULL), not zero
    assert [r.getMessage() for r in caplog.records] == [f"the store {db} was upgraded: {c}" for c in changes]


def test_the_command_line_prints_what_a_migration_changed(current: Path, tmp_path: Path) -> None:
    db = _older(current, tmp_path)
    proc = gpulens("analyze", "--db", str(db), "--window", "6h", timeout=300)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if line.startswith("gpulens: note: ")]
    assert f"gpulens: note: the store {db} was upgraded: device_samples gets the column activity_signal " \
           "(NULL, not recorded, in the rows stored before)" in notes
    assert len(notes) == 2


def test_a_result_table_given_a_newer_column_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    db = tmp_path / "results.duckdb"
    with duckdb.connect(str(db)) as con:
        create_result_tables(con)
        con.execute("ALTER TABLE chargeback DROP COLUMN x_UnallocatedPolicy")
        with caplog.at_level(logging.INFO, logger="gpulens.store"):
            create_result_tables(con)
    assert [r.getMessage() for r in caplog.records] == [
        f"the store {db} was upgraded: chargeback gets the column x_UnallocatedPolicy (NULL in the rows stored before)"]
