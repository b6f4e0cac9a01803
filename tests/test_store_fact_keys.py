"""Fact tables keep their keys unique without primary-key indexes: the ingest checks them itself."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest

from collector.schema import FACT_KEYS, FACTS
from collector.store import Store
from tests.support.synthetic_fleet import synthetic_frames

T0 = 1_790_000_000.0


def _frames(start: float, end: float) -> dict[str, pl.DataFrame]:
    return synthetic_frames(start, end, 60.0)


def _sample(device: str, ts: datetime, activity: float) -> dict[str, object]:
    return {"ts": ts, "node": "n", "gpu_uuid": "GPU-1", "device_id": device, "activity_ratio": activity,
            "source": "test"}


def test_a_window_overlapping_a_stored_one_adds_only_its_new_rows(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.ingest_window("test", T0, T0 + 600, _frames(T0, T0 + 600))
        later = store.ingest_window("test", T0 + 300, T0 + 900, _frames(T0 + 300, T0 + 900))
        assert later.rows["device_samples"] == 5 * 8  # minutes 10..14 of 8 devices; 5..9 were stored
        assert store.count("device_samples") == 15 * 8
        dupes = store.query("SELECT count(*) FROM (SELECT device_id, ts FROM device_samples GROUP BY ALL "
                            "HAVING count(*) > 1)")
        assert dupes == [(0,)]


def test_equal_keys_within_one_window_keep_the_first_row(tmp_path: Path) -> None:
    ts = datetime(2026, 9, 21, 12, 0)
    frame = pl.DataFrame([_sample("MIG-1", ts, 0.25), _sample("MIG-1", ts, 0.75), _sample("MIG-2", ts, 0.5)])
    with Store(str(tmp_path / "s.duckdb")) as store:
        result = store.ingest_window("test", T0, T0 + 60, {"device_samples": frame})
        assert result.rows["device_samples"] == 2
        assert store.query("SELECT device_id, activity_ratio FROM device_samples ORDER BY device_id") == [
            ("MIG-1", 0.25), ("MIG-2", 0.5)]


def test_a_key_column_the_frame_lacks_is_compared_by_its_default(tmp_path: Path) -> None:
    quota = pl.DataFrame({
        "ts": [datetime(2026, 9, 21, 12, 0)], "object_kind": ["ClusterQueue"], "object_name": ["team-a"],
        "resource": ["nvidia.com/gpu"], "nominal_quota": [8.0], "source": ["test"],
    })  # no object_namespace nor flavor: both default to ''
    with Store(str(tmp_path / "s.duckdb")) as store:
        first = store.ingest_window("test", T0, T0 + 60, {"quota_snapshots": quota})
        again = store.ingest_window("other", T0, T0 + 60, {"quota_snapshots": quota})
        assert (first.total_rows, again.total_rows) == (1, 0)
        assert store.query("SELECT object_namespace, flavor FROM quota_snapshots") == [("", "")]


def test_a_fact_row_without_its_key_fails_the_whole_window(tmp_path: Path) -> None:
    frames = _frames(T0, T0 + 600)
    event = pl.DataFrame({"ts": [datetime(2026, 9, 21, 12, 0)], "node": ["n"], "gpu_uuid": ["GPU-1"],
                          "kind": ["xid"], "code": pl.Series([None], dtype=pl.Int32), "source": ["test"]})
    with Store(str(tmp_path / "s.duckdb")) as store:
        with pytest.raises(duckdb.ConstraintException):
            store.ingest_window("test", T0, T0 + 600, {**frames, "events": event})
        assert store.count("device_samples") == 0 and store.count("events") == 0
        assert not store.window_done("test", T0, T0 + 600)


def test_a_store_created_with_primary_keys_on_its_facts_still_ingests_idempotently(tmp_path: Path) -> None:
    db = str(tmp_path / "old.duckdb")
    con = duckdb.connect(db)
    for table, columns in FACTS.items():  # the schema's first version declared these keys
        con.execute(f"CREATE TABLE {table} ({columns}, PRIMARY KEY ({', '.join(FACT_KEYS[table])}))")
    con.close()
    with Store(db) as store:
        store.ingest_window("test", T0, T0 + 600, _frames(T0, T0 + 600))
        again = store.ingest_window("test", T0, T0 + 600, _frames(T0, T0 + 600))
        overlap = store.ingest_window("test", T0 + 300, T0 + 900, _frames(T0 + 300, T0 + 900))
        assert again.total_rows == 0
        assert overlap.rows["device_samples"] == 5 * 8
        assert store.count("device_samples") == 15 * 8


def test_fact_tables_carry_no_index_that_grows_with_the_store(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        keyed = store.query(
            "SELECT DISTINCT table_name FROM duckdb_constraints() "
            "WHERE constraint_type IN ('PRIMARY KEY', 'UNIQUE')"
        )
        indexed = store.query("SELECT DISTINCT table_name FROM duckdb_indexes()")
    assert not {t for (t,) in keyed + indexed} & set(FACTS)
    assert all("ts" in keys for keys in FACT_KEYS.values())

