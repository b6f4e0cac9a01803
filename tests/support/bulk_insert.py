"""Insert many rows into a store table in one statement (DuckDB's ``executemany`` runs one per row)."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pyarrow as pa

from collector.allocation_claims import add_sample_rows
from collector.schema import STORED_AS_CLAIMS


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, columns: Sequence[str],
                rows: Sequence[Sequence[object]]) -> None:
    """Insert ``rows`` (values in ``columns`` order) into ``table``: the same values ``executemany`` would bind,
    as one Arrow table, so a fixture of thousands of rows takes milliseconds instead of seconds."""
    if not rows:
        return
    if table in STORED_AS_CLAIMS:  # a view over claims: the rows are stored as the claims they make
        con.execute(f"CREATE OR REPLACE TEMP TABLE _given AS SELECT * FROM {table} WHERE false")  # noqa: S608
        insert_rows(con, "_given", columns, rows)
        add_sample_rows(con, f"SELECT {', '.join(columns)} FROM _given")  # noqa: S608 - test columns
        con.execute("DROP TABLE _given")
        return
    names = ", ".join(f'"{c}"' for c in columns)
    if len(rows) == 1:  # one row binds faster as parameters than as a table
        marks = ", ".join("?" for _ in columns)
        con.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", list(rows[0]))  # noqa: S608 - test tables
        return
    values = list(zip(*rows, strict=True))
    # DuckDB finds the Arrow table by its Python name (a replacement scan); ``register`` would refuse a
    # connection whose caller left a result unfetched, which ``executemany`` accepts.
    bulk_rows = pa.table({n: pa.array(list(c)) for n, c in zip(columns, values, strict=True)})  # noqa: F841
    con.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM bulk_rows")  # noqa: S608 - test tables
