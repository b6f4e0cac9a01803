"""Where the fact tables come from: the store itself, or Hive-partitioned Parquet exported from it.

Analytics queries read the views ``f_<table>`` (e.g. ``f_device_samples``), never the store tables by
name, so the same SQL runs on a laptop store and on long Parquet history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb

from collector.allocation_claims import claims_of_relation_sql
from collector.parquet import read_fact_claims, read_fact_parquet
from collector.schema import FACTS, STORED_AS_CLAIMS
from collector.schema_version import has_table
from gpulens.core.errors import UserError

FACT_TABLES = (*FACTS, "gaps")
"""Every table analytics reads as ``f_<table>``: the collector's facts and its recorded gaps."""

FACT_VIEWS = frozenset({*(f"f_{t}" for t in FACT_TABLES), *(f"f_{t}" for t in STORED_AS_CLAIMS.values())})
"""The views ``bind_facts`` makes: every fact table's, and the claims of a fact stored as claims."""


def bind_facts(con: duckdb.DuckDBPyConnection, parquet_dir: Path | None, *, temporary: bool = False,
               tables: Sequence[str] = FACT_TABLES, where: str | None = None) -> str:
    """Create the ``f_*`` views (of ``tables``, by default every fact table); a table missing under
    ``parquet_dir`` falls back to the store's. ``where``: a condition the views keep only the rows of
    (a node range's, :mod:`analytics.node_ranges`).

    ``temporary``: views of this connection only (they work on a read-only store, e.g. ``gpulens recommend``
    without writing results, and ``gpulens plan``).
    """
    if parquet_dir is not None and not parquet_dir.is_dir():
        raise UserError(f"--parquet {parquet_dir}: not a directory")
    for table in tables:
        rel = read_fact_parquet(con, parquet_dir / table) if parquet_dir is not None else None
        _bind(con, f"f_{table}", rel if rel is not None else con.table(table), temporary, where)
        if table in STORED_AS_CLAIMS:
            claims = read_fact_claims(con, parquet_dir / table) if parquet_dir is not None else None
            _bind(con, f"f_{STORED_AS_CLAIMS[table]}", claims if claims is not None else _store_claims(con, table),
                  temporary, where)
    return str(parquet_dir) if parquet_dir is not None else "store"


def _bind(con: duckdb.DuckDBPyConnection, view: str, rel: duckdb.DuckDBPyRelation, temporary: bool,
          where: str | None = None) -> None:
    rel = rel.filter(where) if where is not None else rel
    if temporary:
        con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {rel.sql_query()}")
    else:
        rel.create_view(view, replace=True)


def _store_claims(con: duckdb.DuckDBPyConnection, table: str) -> duckdb.DuckDBPyRelation:
    """The store's claims of ``table``; a store of an older schema, opened read-only, has per-sample rows."""
    claims = STORED_AS_CLAIMS[table]
    if has_table(con, claims):
        return con.table(claims)
    rel = con.table(table)
    return con.sql(claims_of_relation_sql(rel.sql_query(), set(rel.columns)))


def bind_fact_files(con: duckdb.DuckDBPyConnection, parquet_dir: Path, files: Mapping[str, Sequence[str]],
                    where: str | None = None) -> None:
    """Point ``f_<table>`` at some of its Parquet files only (paths relative to ``parquet_dir/<table>``), e.g. one
    day's partition while a day part is computed: a query then binds and prunes those files, not the whole
    history's. ``bind_facts`` points them back at every file."""
    for table, names in files.items():
        paths = [parquet_dir / table / n for n in names]
        rel = read_fact_parquet(con, parquet_dir / table, paths)
        if rel is not None:
            rel = rel.filter(where) if where is not None else rel
            rel.create_view(f"f_{table}", replace=True)
        claims = read_fact_claims(con, parquet_dir / table, paths) if table in STORED_AS_CLAIMS else None
        if claims is not None:
            _bind(con, f"f_{STORED_AS_CLAIMS[table]}", claims, False, where)


_EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True)
class Window:
    """The analysed window, aligned to whole buckets (start inclusive, end exclusive, naive UTC)."""

    start: datetime
    end: datetime
    bucket_seconds: int

    @property
    def buckets(self) -> int:
        return int((self.end - self.start).total_seconds()) // self.bucket_seconds

    @property
    def bucket_hours(self) -> float:
        return self.bucket_seconds / 3600.0


def resolve_window(
    con: duckdb.DuckDBPyConnection, end: datetime | None, window_seconds: int, bucket_seconds: int,
    now: datetime | None = None,
) -> Window:
    """Window ending at ``end`` (rounded up to a bucket), or by default at the last complete bucket of the
    data: the bucket boundary at or before the end of the newest device sample (its time plus its step from
    the sample before, at most a bucket) and at or before ``now`` (a store without device samples: the
    newest quota snapshot or pending demand, e.g. Kueue metrics only), never after the data."""
    if end is not None:
        return _window_ending(_epoch_seconds(end), window_seconds, bucket_seconds, ceil=True)
    newest, oldest = con.execute(
        """
        SELECT coalesce((SELECT max(ts) FROM f_device_samples),
                        greatest((SELECT max(ts) FROM f_quota_snapshots), (SELECT max(ts) FROM f_pending_demand))),
               coalesce((SELECT min(ts) FROM f_device_samples),
                        least((SELECT min(ts) FROM f_quota_snapshots), (SELECT min(ts) FROM f_pending_demand)))
        """
    ).fetchone() or (None, None)
    if newest is None:
        raise UserError("the store holds no device samples: run `gpulens collect` first, or pass --end")
    last = _epoch_seconds(newest) + min(_newest_step(con), bucket_seconds)  # the newest sample stands for its step
    if now is not None:
        last = min(last, _epoch_seconds(now))
    window = _window_ending(last, window_seconds, bucket_seconds, ceil=False)
    if window.end <= oldest:
        raise UserError(
            f"the data ({oldest:%Y-%m-%d %H:%M} .. {newest:%Y-%m-%d %H:%M} UTC) holds no complete "
            f"{bucket_seconds // 60} min bucket yet: pass --end, a smaller --bucket, or collect longer"
        )
    return window


def _newest_step(con: duckdb.DuckDBPyConnection) -> float:
    """Seconds from the newest device sample back to the sample before it on the same device (0: none)."""
    row = con.execute(
        """
        WITH newest AS (SELECT arg_max(device_id, ts) AS device_id, max(ts) AS ts FROM f_device_samples)
        SELECT epoch(any_value(n.ts)) - epoch(max(s.ts))
        FROM f_device_samples s JOIN newest n ON s.device_id = n.device_id AND s.ts < n.ts
        """
    ).fetchone()
    return float(row[0]) if row is not None and row[0] is not None else 0.0


def _epoch_seconds(ts: datetime) -> float:
    """Seconds since the epoch of a naive-UTC or aware time."""
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC).replace(tzinfo=None)
    return (ts - _EPOCH).total_seconds()


def _window_ending(offset: float, window_seconds: int, bucket_seconds: int, *, ceil: bool) -> Window:
    """The window whose end is the bucket boundary at or after (``ceil``) or at or before ``offset``."""
    buckets = -(-offset // bucket_seconds) if ceil else offset // bucket_seconds
    end = _EPOCH + timedelta(seconds=buckets * bucket_seconds)
    return Window(end - timedelta(seconds=window_seconds), end, bucket_seconds)


def infer_spacing(con: duckdb.DuckDBPyConnection) -> float | None:
    """Median spacing of one device's consecutive samples, from per-bucket counts (``an_kb``, ``an_kb_unlisted``);
    None without two samples of a device in one bucket."""
    row = con.execute(
        """
        SELECT median((epoch(last_ts) - epoch(first_ts)) / (n - 1)) FILTER (WHERE n > 1)
        FROM (SELECT n, first_ts, last_ts FROM an_kb UNION ALL SELECT n, first_ts, last_ts FROM an_kb_unlisted)
        """
    ).fetchone()
    spacing = row[0] if row is not None else None
    return None if spacing is None or spacing <= 0 else float(spacing)
