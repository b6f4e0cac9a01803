"""Mask URL credentials that a store written before they were redacted still holds (once per store).

Earlier versions stored a ``--scrape`` / ``--prometheus`` URL as given, password included, in the gap
targets and in the window-log sources (``prometheus:<base URL>``). The first writable open redacts them
as collection now writes them (:mod:`gpulens.core.redact`); a row whose redacted key already exists (the
same target given with two passwords) is dropped in favour of it, and a watermark keeps the later mark.
"""

from __future__ import annotations

import duckdb

from gpulens.core.redact import redact

DONE_KEY = "url_credentials_redacted"
"""``schema_info`` key set once the store's URLs are redacted."""

KEYED_COLUMNS = {
    "gaps": ("source", "target", "gap_start"),
    "ingest_batches": ("source", "window_start", "window_end"),
    "watermarks": ("source",),
}
"""Each table holding a target URL and its primary key (the first columns of it that may hold a URL)."""

URL_COLUMNS = {"gaps": ("source", "target"), "ingest_batches": ("source",), "watermarks": ("source",)}


def redact_stored_credentials(con: duckdb.DuckDBPyConnection) -> None:
    """Redact the URLs of the tables above, once (``schema_info`` remembers it)."""
    if con.execute("SELECT 1 FROM schema_info WHERE key = ?", [DONE_KEY]).fetchall():
        return
    con.execute("BEGIN TRANSACTION")
    try:
        for table, columns in URL_COLUMNS.items():
            for column in columns:
                _redact_column(con, table, column)
        con.execute("INSERT OR REPLACE INTO schema_info VALUES (?, '1')", [DONE_KEY])
        con.execute("COMMIT")
    except duckdb.Error:
        con.execute("ROLLBACK")
        raise


def _redact_column(con: duckdb.DuckDBPyConnection, table: str, column: str) -> None:
    values = [row[0] for row in con.execute(
        f"SELECT DISTINCT {column} FROM {table} WHERE {column} LIKE '%://%@%'").fetchall()]  # noqa: S608
    others = [c for c in KEYED_COLUMNS[table] if c != column]
    same_key = " AND ".join([f"t.{column} = ?", *(f"t.{c} = {table}.{c}" for c in others)])
    for value in values:
        clean = redact(value)
        if clean == value:
            continue
        if table == "watermarks":  # keep the later of the two marks
            con.execute("UPDATE watermarks SET watermark = greatest(watermark, (SELECT watermark FROM watermarks "
                        "WHERE source = ?)) WHERE source = ?", [value, clean])
        con.execute(f"DELETE FROM {table} WHERE {column} = ? AND EXISTS "  # noqa: S608
                    f"(SELECT 1 FROM {table} t WHERE {same_key})", [value, clean])
        con.execute(f"UPDATE {table} SET {column} = ? WHERE {column} = ?", [clean, value])  # noqa: S608
