"""The store: idempotent, transactional, incremental ingest; gaps; Parquet export that reads back."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pytest

from collector.parquet import attach_parquet, export_parquet
from collector.store import Gap, Store
from gpulens.core.errors import UserError
from tests.support.synthetic_fleet import synthetic_frames

T0 = 1_790_000_000.0  # 2026-09-21


def _frames(start: float = T0, end: float = T0 + 600) -> dict[str, pl.DataFrame]:
    return synthetic_frames(start, end, 60.0)


def _counts(store: Store) -> dict[str, int]:
    tables = ["device_samples", "gpu_samples", "allocations", "devices", "gpus", "ingest_batches"]
    return {t: store.count(t) for t in tables}


def test_the_same_window_twice_adds_no_rows(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        first = store.ingest_window("test", T0, T0 + 600, _frames())
        before = _counts(store)
        second = store.ingest_window("test", T0, T0 + 600, _frames())
        assert first.rows["device_samples"] == 80
        assert second.total_rows == 0
        assert _counts(store) == before


def test_a_window_that_fails_midway_leaves_nothing_behind(tmp_path: Path) -> None:
    frames = _frames()
    broken = frames["allocations"].with_columns(pl.lit("not a number").alias("gpu_equivalents"))
    with Store(str(tmp_path / "s.duckdb")) as store:
        with pytest.raises(duckdb.Error):
            store.ingest_window("test", T0, T0 + 600, {**frames, "allocations": broken})
        assert store.count("device_samples") == 0
        assert store.count("ingest_batches") == 0
        assert store.watermark("test") is None
        assert not store.window_done("test", T0, T0 + 600)


def test_watermarks_are_per_source_and_only_move_forward(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.ingest_window("a", T0 + 600, T0 + 1200, _frames(T0 + 600, T0 + 1200))
        store.ingest_window("a", T0, T0 + 600, _frames())
        store.ingest_window("b", T0, T0 + 60, {})
        assert store.watermark("a") == T0 + 1200
        assert store.watermark("b") == T0 + 60
        assert store.window_done("a", T0, T0 + 600)


def test_gaps_are_recorded_instead_of_invented_values(tmp_path: Path) -> None:
    frames = _frames()
    without_minute_5 = {k: (v.filter(pl.col("ts") != pl.from_epoch(pl.lit(int(T0 + 300)), time_unit="s"))
                            if "ts" in v.columns else v) for k, v in frames.items()}
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.ingest_window("test", T0, T0 + 600, without_minute_5, [Gap("node-0", T0 + 300, T0 + 360, "down")])
        assert store.query("SELECT target, reason FROM gaps") == [("node-0", "down")]
        assert store.count("device_samples") == 72  # 9 minutes x 8 devices: nothing filled in


def test_dimensions_widen_first_and_last_seen_without_duplicates(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.ingest_window("test", T0 + 600, T0 + 1200, _frames(T0 + 600, T0 + 1200))
        store.ingest_window("test", T0, T0 + 600, _frames())
        rows = store.query("SELECT count(*), min(epoch(first_seen)), max(epoch(last_seen)) FROM devices")
        assert rows == [(8, T0, T0 + 1140)]


def test_export_parquet_is_partitioned_by_date_and_reads_back(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    day = 86400.0
    with Store(str(db)) as store:
        store.ingest_window("test", T0, T0 + 600, _frames())
        store.ingest_window("test", T0 + day, T0 + day + 600, _frames(T0 + day, T0 + day + 600))
    out = tmp_path / "pq"
    summary = export_parquet(str(db), out)
    assert summary.rows["device_samples"] == 160
    dates = sorted(p.name for p in (out / "device_samples").iterdir())
    assert dates == ["date=2026-09-21", "date=2026-09-22"]
    con = duckdb.connect()
    attach_parquet(con, out)
    original = duckdb.connect(str(db), read_only=True)
    sql = "SELECT * FROM device_samples ORDER BY device_id, ts"
    assert con.execute(sql).fetchall() == original.execute(sql).fetchall()
    sql = "SELECT * FROM devices ORDER BY device_id"
    assert con.execute(sql).fetchall() == original.execute(sql).fetchall()
    assert con.execute("SELECT count(*) FROM events").fetchall() == [(0,)]  # empty, but there to query


def test_export_parquet_of_a_missing_store_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no store at"):
        export_parquet(str(tmp_path / "nope.duckdb"), tmp_path / "out")
