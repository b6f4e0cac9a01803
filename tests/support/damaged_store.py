"""Damage a real store file as a failing disk would: bytes overwritten in the middle of a table's data block."""

from __future__ import annotations

from pathlib import Path

import duckdb

FILE_HEADERS = 3 * 4096
"""DuckDB's main header and its two database headers come before the first block."""
CHECKSUM = 8
"""Each block starts with its checksum."""


def damage_table(path: Path, table: str) -> int:
    """Overwrite 256 bytes in the middle of the first data block that holds ``table``'s rows; returns the
    byte offset written. The file must be checkpointed (closed by its last writer)."""
    with duckdb.connect(str(path), read_only=True) as con:
        block_size = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()
        row = con.execute(
            f"SELECT block_id, max(block_offset) FROM pragma_storage_info('{table}') "  # noqa: S608 - test's own name
            "WHERE block_id >= 0 GROUP BY block_id ORDER BY block_id LIMIT 1"
        ).fetchone()
    assert block_size is not None and row is not None, f"{table} has no data block in {path}"
    block, last_segment = row
    offset = FILE_HEADERS + int(block) * int(block_size[0]) + CHECKSUM + int(last_segment) // 2
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(b"\xde\xad\xbe\xef" * 64)
    return offset
