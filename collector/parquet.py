"""Export the store to Hive-partitioned Parquet (facts by ``date=YYYY-MM-DD``) and read it back.

Layout under ``out``: ``<fact table>/date=2026-11-28/data_0.parquet`` for every fact table, and one
``<dimension table>.parquet`` file per dimension / bookkeeping table. :func:`attach_parquet` creates
DuckDB views with the store's table names over such a directory, so analytics can run on it unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import duckdb

from collector.allocation_claims import claims_by_day_sql, claims_of_relation_sql, expand_sql
from collector.schema import ALL_TABLES, FACTS, STORED_AS_CLAIMS, fact_columns
from collector.store_errors import StoreMissing, connect_store, storage_error
from gpulens.core.errors import UserError


@dataclass(frozen=True)
class ExportSummary:
    """Rows written per table."""

    out: Path
    rows: dict[str, int]


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")


def export_parquet(db_path: str, out: Path) -> ExportSummary:
    """Write every table of the store at ``db_path`` under ``out`` (facts partitioned by date)."""
    if not Path(db_path).is_file():
        raise StoreMissing(db_path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create the folder: {exc.strerror or exc}") from exc
    rows: dict[str, int] = {}
    con = connect_store(db_path, read_only=True)
    try:
        present = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        for table in ALL_TABLES:
            if table not in present:
                continue
            count = con.execute(f"SELECT count(*) FROM {table}").fetchall()  # noqa: S608 - schema names
            rows[table] = int(count[0][0])
            if table in FACTS:
                target = out / table
                if rows[table] == 0:
                    continue
                # a fact stored as claims is written as claims, cut at midnights so a day's files hold that day
                rows_of = (f"({claims_by_day_sql(STORED_AS_CLAIMS[table])})" if table in STORED_AS_CLAIMS
                           else f"(SELECT *, CAST(ts AS DATE) AS date FROM {table})")  # noqa: S608 - schema names
                con.execute(
                    f"COPY {rows_of} "  # noqa: S608
                    f"TO '{_sql_path(target)}' (FORMAT parquet, PARTITION_BY (date), OVERWRITE, COMPRESSION zstd)"
                )
            else:
                con.execute(
                    f"COPY {table} TO '{_sql_path(out / f'{table}.parquet')}' (FORMAT parquet)"  # noqa: S608
                )
    except duckdb.Error as exc:  # a damaged block, a full disk under --out: one line naming what failed
        raise storage_error(db_path, exc) or exc from exc
    finally:
        con.close()
    return ExportSummary(out, rows)


def read_fact_parquet(con: duckdb.DuckDBPyConnection, folder: Path,
                      files: Sequence[Path] | None = None) -> duckdb.DuckDBPyRelation | None:
    """The one reader of a fact table's Parquet files: every ``folder/**/*.parquet`` (or only ``files``, some
    of them), Hive partition keys (``date=...``, ``day=...``) as columns, files of different column sets
    unified by name; None when the folder holds no Parquet file. The path may be anything DuckDB reads (a
    local folder here).

    Columns the store has and the files lack (files written before a column existed, e.g. an older
    export without ``ecc_corrected_total``) read as typed NULLs: not measured, never zero. A fact stored as
    claims (allocations) reads as the per-sample rows its claims stand for."""
    claims = read_fact_claims(con, folder, files) if folder.name in STORED_AS_CLAIMS else None
    if claims is not None:
        return con.sql(expand_sql(f"({claims.sql_query()})", fact_columns(folder.name)))
    return _read_files(con, folder, files)


def read_fact_claims(con: duckdb.DuckDBPyConnection, folder: Path,
                     files: Sequence[Path] | None = None) -> duckdb.DuckDBPyRelation | None:
    """The claims of a fact stored as claims, from its Parquet files (per-sample files of an earlier export
    read as one-sample claims); None when the folder holds no Parquet file."""
    rel = _read_files(con, folder, files)
    if rel is None:
        return None
    return con.sql(claims_of_relation_sql(rel.sql_query(), set(rel.columns)))


def _read_files(con: duckdb.DuckDBPyConnection, folder: Path,
                files: Sequence[Path] | None = None) -> duckdb.DuckDBPyRelation | None:
    if files is not None:
        if not files:
            return None
        rel = con.read_parquet([str(f) for f in files], hive_partitioning=True, union_by_name=True)
    elif not folder.is_dir() or not any(folder.rglob("*.parquet")):
        return None
    else:
        rel = con.read_parquet(str(folder / "**" / "*.parquet"), hive_partitioning=True, union_by_name=True)
    have = set(rel.columns)
    missing = [(name, kind) for name, kind in table_columns(folder.name) if name not in have]
    if missing:
        rel = rel.project(", ".join(["*", *(f'NULL::{kind} AS "{name}"' for name, kind in missing)]))
    return rel


def read_parquet_file(con: duckdb.DuckDBPyConnection, path: Path) -> duckdb.DuckDBPyRelation:
    """One Parquet file that is not a store table (a cloud bill) as a relation of ``con``."""
    return con.read_parquet(str(path))


def table_columns(table: str) -> tuple[tuple[str, str], ...]:
    """The store's columns of ``table`` (name, DuckDB type); empty for a name the store does not have."""
    return _store_columns().get(table, ())


@cache
def _store_columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """Every store table's columns, from one in-memory database holding their shapes (made once)."""
    con = duckdb.connect()
    try:
        for name, columns in ALL_TABLES.items():
            con.execute(f"CREATE TABLE {name} ({columns})")  # our own schema constants
        rows = con.execute(
            "SELECT table_name, column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
            "ORDER BY table_name, column_index"
        ).fetchall()
    finally:
        con.close()
    out: dict[str, list[tuple[str, str]]] = {}
    for table, name, kind in rows:
        out.setdefault(str(table), []).append((str(name), str(kind)))
    return {t: tuple(cols) for t, cols in out.items()}


def attach_parquet(con: duckdb.DuckDBPyConnection, directory: Path) -> list[str]:
    """Create views named like the store's tables over an exported directory; returns their names.

    Fact tables that were empty (no Parquet file) become empty temporary tables with the same columns.
    """
    made = []
    for table, columns in ALL_TABLES.items():
        if table in FACTS:
            rel = read_fact_parquet(con, directory / table)
            if rel is None:  # an empty fact table was exported as no file: an empty table, same columns
                con.execute(f"CREATE OR REPLACE TEMP TABLE {table} ({columns})")
                made.append(table)
                continue
            if "date" in rel.columns:
                rel = rel.project("* EXCLUDE (date)")
            rel.create_view(table, replace=True)
        else:
            file = directory / f"{table}.parquet"
            if not file.is_file():
                continue
            con.execute(f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM read_parquet('{_sql_path(file)}')")  # noqa: S608
        made.append(table)
    return made


__all__ = ["ExportSummary", "attach_parquet", "export_parquet", "read_fact_parquet"]
