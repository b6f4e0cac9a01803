"""What a fact Parquet file holds: its rows, its time bounds and a hash of its bytes, known by content.

A day part is reused when its files hold what they held when it was computed, so a day is known by
what its files contain, never by their modification times: a copy with new times is the same day, and
a file rewritten with other rows is a new one even when its size and modification time did not move.
The rows and the time bounds come from each file's footer (DuckDB's ``parquet_metadata``); the content
is the SHA-256 of the file's bytes. Hashing reads the whole file, so the hash is kept in the store
(``parquet_file_contents``) with the file's stat (size, modification and change times, inode), as git
keeps its index: a file whose stat is unchanged is not read again. Any write to a file moves its change
time, which no user can set back, so a rewrite is always hashed again; a copy is hashed once and, holding
the same bytes, keeps its days.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb

CONTENTS_TABLE = "parquet_file_contents"

_FOOTERS = """
    SELECT file_name,
           sum(row_group_num_rows) FILTER (WHERE column_id = 0) AS rows,
           min(TRY_CAST(stats_min_value AS TIMESTAMP)) FILTER (WHERE path_in_schema = 'ts') AS ts_min,
           max(TRY_CAST(stats_max_value AS TIMESTAMP)) FILTER (WHERE path_in_schema = 'ts') AS ts_max
    FROM parquet_metadata($files) GROUP BY file_name
"""


@dataclass(frozen=True)
class FactFile:
    """One fact file as its content describes it (``ts_min``/``ts_max``: None without ``ts`` statistics)."""

    path: str
    rows: int
    ts_min: datetime | None
    ts_max: datetime | None
    sha256: str

    def within(self, start: datetime, end: datetime) -> bool:
        """Every row's ``ts`` lies in ``[start, end)`` by the footer's statistics (unknown: False)."""
        return self.ts_min is not None and self.ts_max is not None and start <= self.ts_min and self.ts_max < end


def fact_files(con: duckdb.DuckDBPyConnection, paths: Sequence[Path]) -> dict[Path, FactFile]:
    """Each file's rows, time bounds and content hash (hashing only files not seen as they are now); the
    store must have the result tables (``create_result_tables``)."""
    if not paths:
        return {}
    names = [str(p) for p in paths]
    stats = {name: _stat(name) for name in names}
    footers: dict[str, tuple[int, datetime | None, datetime | None]] = dict.fromkeys(names, (0, None, None))
    footers |= {str(f): (int(r or 0), lo, hi) for f, r, lo, hi in con.execute(_FOOTERS, {"files": names}).fetchall()}
    seen = {
        path: sha for path, stat, sha in con.execute(
            f"SELECT path, stat, sha256 FROM {CONTENTS_TABLE} WHERE list_contains($p, path)",  # noqa: S608
            {"p": names},
        ).fetchall()
        if stat == stats[path]
    }
    unseen = [name for name in names if name not in seen]
    if unseen:
        with ThreadPoolExecutor(max_workers=min(4, len(unseen))) as pool:  # hashlib releases the GIL
            seen.update(zip(unseen, pool.map(_sha256, unseen), strict=True))
        con.execute(
            f"""INSERT OR REPLACE INTO {CONTENTS_TABLE}
                SELECT unnest($p), unnest($s), unnest($r), unnest($lo), unnest($hi), unnest($h)""",  # noqa: S608
            {"p": unseen, "s": [stats[n] for n in unseen], "r": [footers[n][0] for n in unseen],
             "lo": [footers[n][1] for n in unseen], "hi": [footers[n][2] for n in unseen],
             "h": [seen[n] for n in unseen]},
        )
    return {Path(n): FactFile(n, footers[n][0], footers[n][1], footers[n][2], seen[n]) for n in names}


def _stat(path: str) -> str:
    """The file's size, modification and change times and inode: unchanged means not written since."""
    st = os.stat(path)
    return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_dev}:{st.st_ino}"


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
