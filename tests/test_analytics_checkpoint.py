"""The store is checkpointed in the background while a run's window-level stages go on (``checkpoint.py``).

What a day part committed reaches the database file during the block, so closing the store has only the
run's own rows left to write; a checkpoint DuckDB cannot take now is left to the close, and the block's
work goes on either way.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from analytics.checkpoint import background_checkpoint


def _wal_bytes(db: Path) -> int:
    wal = Path(f"{db}.wal")
    return wal.stat().st_size if wal.exists() else 0


def _store_with_committed_rows(tmp_path: Path) -> tuple[Path, duckdb.DuckDBPyConnection]:
    db = tmp_path / "store.duckdb"
    con = duckdb.connect(str(db))
    con.execute("SET checkpoint_threshold = '1GB'")  # nothing is checkpointed on commit in this test
    con.execute("CREATE TABLE parts AS SELECT range AS i, 'node-' || range AS node FROM range(50000)")
    con.execute("INSERT INTO parts SELECT range, 'node-' || range FROM range(50000, 60000)")
    return db, con


def test_rows_committed_before_the_block_reach_the_file_while_the_block_runs(tmp_path: Path) -> None:
    db, con = _store_with_committed_rows(tmp_path)
    assert _wal_bytes(db) > 0
    with background_checkpoint(con):
        total = con.execute("SELECT sum(i) FROM parts").fetchone()  # the run goes on meanwhile
    assert total == (sum(range(60000)),)
    assert _wal_bytes(db) == 0
    con.close()
    reopened = duckdb.connect(str(db), read_only=True)
    assert reopened.execute("SELECT count(*) FROM parts").fetchone() == (60000,)
    reopened.close()


def test_a_checkpoint_duckdb_cannot_take_now_is_left_to_the_close(tmp_path: Path) -> None:
    db, con = _store_with_committed_rows(tmp_path)
    writer = con.cursor()
    writer.execute("BEGIN TRANSACTION")
    writer.execute("INSERT INTO parts VALUES (-1, 'pending')")  # another client's open write
    with background_checkpoint(con):
        assert con.execute("SELECT count(*) FROM parts").fetchone() == (60000,)
    writer.execute("COMMIT")
    writer.close()
    con.close()
    assert not os.path.exists(f"{db}.wal") or _wal_bytes(db) == 0  # the close checkpointed what was left
    reopened = duckdb.connect(str(db), read_only=True)
    assert reopened.execute("SELECT count(*) FROM parts").fetchone() == (60001,)
    reopened.close()
