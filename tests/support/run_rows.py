"""Every result row of an analysis run, for comparing two runs (another layout, another split) row for row."""

from __future__ import annotations

from pathlib import Path

import duckdb

_WHEN_RUN = {"run_id", "created_at", "generated_at", "decided_at", "part_id", "summary"}
"""Columns that say which run wrote a row, when, or how long its phases took, not what it found."""


def run_rows(path: Path, run_id: str) -> dict[str, list[tuple[object, ...]]]:
    """Per result table (every table with a ``run_id``), the run's rows sorted, doubles rounded to 9 places,
    without the columns that name the run or its clock."""
    with duckdb.connect(str(path), read_only=True) as con:
        tables = con.execute(
            "SELECT table_name, list(column_name ORDER BY column_index), list(data_type ORDER BY column_index) "
            "FROM duckdb_columns() WHERE table_name IN "
            "(SELECT table_name FROM duckdb_columns() WHERE column_name = 'run_id') GROUP BY 1 ORDER BY 1"
        ).fetchall()
        out = {}
        for table, names, types in tables:
            cols = [f'round("{n}", 9)' if t == "DOUBLE" else f'"{n}"'
                    for n, t in zip(names, types, strict=True) if n not in _WHEN_RUN]
            out[table] = con.execute(
                f'SELECT {", ".join(cols)} FROM "{table}" WHERE run_id = ? ORDER BY ALL', [run_id]  # noqa: S608
            ).fetchall()
        return out


def latest_run(path: Path) -> str:
    """The run id of the newest analysis run in the store."""
    with duckdb.connect(str(path), read_only=True) as con:
        row = con.execute("SELECT run_id FROM analysis_runs ORDER BY created_at DESC LIMIT 1").fetchone()
    assert row is not None, f"{path} holds no analysis run"
    return str(row[0])
