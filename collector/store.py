"""Idempotent, transactional ingest into the DuckDB store.

A *window* is what one source delivered for one span of time (a scrape, a ``query_range`` chunk, a day
of simulated history). :meth:`Store.ingest_window` writes the window's fact rows, its dimension
upserts, its gaps, its ``ingest_batches`` row and the source's watermark in ONE transaction: a kill in
the middle leaves no half window, and the same window twice adds nothing: fact rows are inserted in
bulk from a registered Arrow table (never row by row), less the rows whose key (``FACT_KEYS``) is
already stored. That check is one anti-join against the stored rows of the batch's own time span,
which DuckDB's min/max zone maps narrow to a few row groups, so a window costs the same whatever the
size of the store (a primary-key index would be probed on every insert and rewritten on every
checkpoint). Allocations are stored as claims (:mod:`collector.allocation_claims`): a window's rows
extend the stored claims they continue.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeAlias

import duckdb
import polars as pl
import pyarrow as pa

from collector.allocation_claims import add_samples
from collector.schema import DIMENSIONS, FACT_KEYS, FACTS, STORED_AS_CLAIMS, connect
from collector.store_errors import storage_failures, store_error

Frame: TypeAlias = pl.DataFrame | pa.Table


@dataclass(frozen=True)
class Gap:
    """A span where ``target`` was expected to deliver and did not (analytics treats it as unknown)."""

    target: str
    start: float
    end: float
    reason: str


@dataclass(frozen=True)
class WindowResult:
    """What one committed window added: new rows per table (0 everywhere when it was already stored)."""

    source: str
    start: float
    end: float
    rows: Mapping[str, int] = field(default_factory=dict)
    gaps: int = 0

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


def to_datetime(ts: float) -> datetime:
    """Unix seconds -> naive UTC ``datetime`` (the store's TIMESTAMP convention)."""
    return datetime.fromtimestamp(ts, tz=UTC).replace(tzinfo=None)


def from_datetime(value: datetime) -> float:
    """Naive UTC ``datetime`` from the store -> Unix seconds."""
    return value.replace(tzinfo=UTC).timestamp()


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str | None]:
    """The table's columns in order, each with its DEFAULT expression (``None`` when it has none)."""
    rows = con.execute(
        "SELECT column_name, column_default FROM information_schema.columns "
        "WHERE table_name = ? ORDER BY ordinal_position",
        [table],
    ).fetchall()
    return {r[0]: r[1] for r in rows}


def _as_arrow(frame: Frame) -> pa.Table:
    return frame.to_arrow() if isinstance(frame, pl.DataFrame) else frame


def _as_polars(frame: Frame) -> pl.DataFrame:
    if isinstance(frame, pl.DataFrame):
        return frame
    converted = pl.from_arrow(frame)
    assert isinstance(converted, pl.DataFrame)  # a pa.Table converts to a frame, never a series
    return converted


def _roll_back(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back the open transaction; a COMMIT that failed (a full disk) has already ended it, and the error
    that ended it is the one to report."""
    try:
        con.execute("ROLLBACK")
    except duckdb.TransactionException as exc:
        if "no transaction is active" not in str(exc):
            raise


class Store:
    """One DuckDB store file, opened for writing. Use as a context manager or call :meth:`close`."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.con = connect(path)
        except duckdb.Error as exc:  # held by another process, bad directory, not a DuckDB file
            raise store_error(path, exc) from None
        self._table_columns = {t: _columns(self.con, t) for t in (*DIMENSIONS, *FACTS)}
        self._staged: list[str] = []  # Arrow views registered by the window being written

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with storage_failures(self.path):  # closing checkpoints the WAL into the file: the disk may be full
            self.con.close()

    # -- bookkeeping -------------------------------------------------------------------------------

    def watermark(self, source: str) -> float | None:
        """The source's high-water mark (Unix seconds), or ``None`` before its first window."""
        rows = self.con.execute("SELECT watermark FROM watermarks WHERE source = ?", [source]).fetchall()
        return from_datetime(rows[0][0]) if rows else None

    def window_done(self, source: str, start: float, end: float) -> bool:
        """True when this exact window of ``source`` is already committed."""
        rows = self.con.execute(
            "SELECT 1 FROM ingest_batches WHERE source = ? AND window_start = ? AND window_end = ?",
            [source, to_datetime(start), to_datetime(end)],
        ).fetchall()
        return bool(rows)

    def window_complete(self, source: str, start: float, end: float) -> bool:
        """True when this exact window of ``source`` is committed and no recorded gap of it lies inside:
        a window with gaps is collected again (what the source now has fills them)."""
        if not self.window_done(source, start, end):
            return False
        rows = self.con.execute(
            "SELECT 1 FROM gaps WHERE source = ? AND gap_start < ? AND gap_end > ? LIMIT 1",
            [source, to_datetime(end), to_datetime(start)],
        ).fetchall()
        return not rows

    def count(self, table: str) -> int:
        if table not in self._table_columns and table not in ("ingest_batches", "gaps", "watermarks"):
            raise ValueError(f"unknown table {table!r}")
        rows = self.con.execute(f"SELECT count(*) FROM {table}").fetchall()  # noqa: S608 - table is allow-listed
        return int(rows[0][0])

    # -- ingest ------------------------------------------------------------------------------------

    def ingest_window(
        self,
        source: str,
        start: float,
        end: float,
        frames: Mapping[str, Frame],
        gaps: tuple[Gap, ...] | list[Gap] = (),
        *,
        now: float | None = None,
        replace_gaps: bool = False,
    ) -> WindowResult:
        """Write one window atomically; returns the rows it added per table.

        With ``replace_gaps`` the window's gaps replace the source's stored gaps within ``[start, end)``
        (a gap reaching across an edge keeps its part outside), so re-collecting a span leaves only the
        gaps it still finds.

        ``frames`` maps store table names to frames whose columns are a subset of the table's (missing
        columns get their defaults or NULL). Facts are inserted or ignored on their primary keys;
        dimensions are upserted (``first_seen``/``last_seen`` widened, other columns refreshed).
        """
        with storage_failures(self.path):  # a full disk or a damaged block: one line naming the store
            return self._ingest_window(source, start, end, frames, gaps, now, replace_gaps)

    def _ingest_window(
        self, source: str, start: float, end: float, frames: Mapping[str, Frame], gaps: tuple[Gap, ...] | list[Gap],
        now: float | None, replace_gaps: bool,
    ) -> WindowResult:
        committed = to_datetime(now if now is not None else datetime.now(UTC).timestamp())
        rows: dict[str, int] = {}
        con = self.con
        con.execute("BEGIN TRANSACTION")
        self._staged = []
        try:
            for table, frame in frames.items():
                if (frame.height if isinstance(frame, pl.DataFrame) else frame.num_rows) == 0:
                    continue
                if table in FACTS:
                    rows[table] = self._insert_facts(table, _as_polars(frame))
                elif table in DIMENSIONS:
                    rows[table] = self._upsert_dimension(table, _as_arrow(frame))
                else:
                    raise ValueError(f"not a store table: {table!r}")
            if replace_gaps:
                self._clear_gaps(source, start, end)
            for gap in gaps:
                con.execute(
                    "INSERT OR IGNORE INTO gaps VALUES (?, ?, ?, ?, ?)",
                    [source, gap.target, to_datetime(gap.start), to_datetime(gap.end), gap.reason],
                )
            con.execute(
                "INSERT OR REPLACE INTO ingest_batches VALUES (?, ?, ?, ?, ?)",
                [source, to_datetime(start), to_datetime(end), sum(rows.values()), committed],
            )
            con.execute(
                "INSERT INTO watermarks VALUES (?, ?, ?) ON CONFLICT (source) DO UPDATE SET "
                "watermark = greatest(watermarks.watermark, excluded.watermark), "
                "updated_at = excluded.updated_at",
                [source, to_datetime(end), committed],
            )
            con.execute("COMMIT")
        except BaseException:
            _roll_back(con)
            raise
        finally:
            # After COMMIT or ROLLBACK: an aborted transaction refuses even an unregister.
            for name in self._staged:
                con.unregister(name)
        return WindowResult(source, start, end, rows, len(gaps))

    def _clear_gaps(self, source: str, start: float, end: float) -> None:
        """Remove ``source``'s gaps within ``[start, end)``, keeping the parts of gaps outside it."""
        lo, hi = to_datetime(start), to_datetime(end)
        self.con.execute(  # the tail beyond the window of a gap that reaches past its end
            "INSERT OR IGNORE INTO gaps SELECT source, target, ?, gap_end, reason FROM gaps "
            "WHERE source = ? AND gap_start < ? AND gap_end > ?",
            [hi, source, hi, hi],
        )
        self.con.execute(  # the head before the window of a gap that starts before it
            "UPDATE gaps SET gap_end = ? WHERE source = ? AND gap_start < ? AND gap_end > ?",
            [lo, source, lo, lo],
        )
        self.con.execute("DELETE FROM gaps WHERE source = ? AND gap_start >= ? AND gap_start < ?", [source, lo, hi])

    def _register(self, arrow: pa.Table) -> str:
        """Register ``arrow`` as a view for this window's statements (unregistered when the window ends)."""
        name = f"_in_{uuid.uuid4().hex}"
        self.con.register(name, arrow)
        self._staged.append(name)
        return name

    def _insert_facts(self, table: str, incoming: pl.DataFrame) -> int:
        """Insert the rows whose key is not stored yet (the first of equal keys in ``incoming``)."""
        columns = self._table_columns[table]
        unknown = set(incoming.columns) - set(columns)
        if unknown:
            raise ValueError(f"{table}: unknown columns {sorted(unknown)}")
        keys = FACT_KEYS[table]
        present = [k for k in keys if k in incoming.columns]
        if present and incoming.select(pl.struct(present).is_duplicated().any()).item():
            incoming = incoming.unique(present, keep="first", maintain_order=True)
        span = incoming.select(lo=pl.col("ts").min(), hi=pl.col("ts").max()).row(0) if "ts" in present else None
        cols = [c for c in columns if c in incoming.columns]
        # A key column the frame lacks takes its DEFAULT, as the INSERT will store it.
        staged = [*cols, *(f"{columns[k] or 'NULL'} AS {k}" for k in keys if k not in incoming.columns)]
        match = " AND ".join(f"t.{k} = n.{k}" for k in keys)
        name = self._register(incoming.to_arrow())
        if table in STORED_AS_CLAIMS:  # every column: a claim holds them all
            every = [c if c in incoming.columns else f"{columns[c] or 'NULL'} AS {c}" for c in columns]
            staged_all = f"(SELECT {', '.join(every)} FROM {name})"  # noqa: S608 - names from the schema
            return add_samples(self.con, staged_all, *(span or (None, None)))
        col_list = ", ".join(cols)
        inserted = self.con.execute(
            f"INSERT INTO {table} ({col_list}) SELECT {col_list} "  # noqa: S608 - names from the schema
            f"FROM (SELECT {', '.join(staged)} FROM {name}) n "
            f"WHERE NOT EXISTS (SELECT 1 FROM {table} t WHERE t.ts BETWEEN ? AND ? AND {match})",
            list(span) if span else [None, None],
        ).fetchall()
        return int(inserted[0][0]) if inserted else 0

    def _upsert_dimension(self, table: str, arrow: pa.Table) -> int:
        table_cols = list(self._table_columns[table])
        cols = [c for c in arrow.column_names if c in table_cols]
        key = table_cols[0]
        name = self._register(arrow)
        fresh = self.con.execute(
            f"SELECT count(DISTINCT n.{key}) FROM {name} n ANTI JOIN {table} t ON n.{key} = t.{key}"  # noqa: S608
        ).fetchall()[0][0]
        col_list = ", ".join(cols)
        updates = []
        for c in cols:
            if c == key:
                continue
            if c == "first_seen":
                updates.append(f"first_seen = least({table}.first_seen, excluded.first_seen)")
            elif c == "last_seen":
                updates.append(f"last_seen = greatest({table}.last_seen, excluded.last_seen)")
            else:
                updates.append(f"{c} = coalesce(excluded.{c}, {table}.{c})")
        # One row per key in the incoming frame (the latest when several), then upsert.
        order = "last_seen DESC NULLS LAST" if "last_seen" in cols else "1"
        dedup = (
            f"SELECT {col_list} FROM {name} "  # noqa: S608
            f"QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY {order}) = 1"
        )
        if "first_seen" in cols:
            dedup = (
                f"SELECT * REPLACE (min(first_seen) OVER (PARTITION BY {key}) AS first_seen) "  # noqa: S608
                f"FROM {name} QUALIFY row_number() OVER (PARTITION BY {key} ORDER BY {order}) = 1"
            )
            dedup = f"SELECT {col_list} FROM ({dedup})"  # noqa: S608
        conflict = f"DO UPDATE SET {', '.join(updates)}" if updates else "DO NOTHING"
        self.con.execute(
            f"INSERT INTO {table} ({col_list}) {dedup} ON CONFLICT ({key}) {conflict}"  # noqa: S608
        ).fetchall()
        return int(fresh)

    def query(self, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        """Run a read query on the store (tests and summaries)."""
        return self.con.execute(sql, params or []).fetchall()

    def frame(self, sql: str, params: list[Any] | None = None) -> pl.DataFrame:
        """Run a read query on the store and return a polars frame."""
        return self.con.sql(sql, params=params or None).pl()
