"""Backfill from the simulator, and the simulator's history through gpulens's exposition into the store."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from collector.backfill import ChunkProgress, backfill_simulated
from collector.exposition import parse_exposition
from collector.mapping import to_store_frames
from collector.store import Store
from gpulens.sim.fleet import SimulatedFleet
from gpulens.sim.scenario_file import load_scenario
from tests.support.store_render import render_text, series_for

START = 1_790_000_000.0 - 1_790_000_000.0 % 3600
HOUR = 3600.0


@pytest.fixture(scope="module")
def fleet() -> SimulatedFleet:
    return SimulatedFleet(load_scenario(None))


def test_backfill_writes_the_history_chunk_by_chunk_and_twice_adds_nothing(
    tmp_path: Path, fleet: SimulatedFleet
) -> None:
    db = tmp_path / "s.duckdb"
    seen: list[ChunkProgress] = []
    summary = backfill_simulated(db, None, START, START + 3 * HOUR, 60.0, seen.append, chunk=HOUR, fleet=fleet)
    truth = fleet.history(START, START + 3 * HOUR, 60.0)
    assert [(p.index, p.total, p.skipped) for p in seen] == [(1, 3, False), (2, 3, False), (3, 3, False)]
    for table in ("device_samples", "gpu_samples", "allocations", "quota_snapshots", "pod_snapshots"):
        assert summary.rows[table] == getattr(truth, table).height, table
    with Store(str(db)) as store:
        got = store.frame("SELECT * FROM device_samples ORDER BY device_id, ts")
        assert got.equals(truth.device_samples.sort("device_id", "ts"))
        before = {t: store.count(t) for t in ("device_samples", "allocations", "events", "devices")}
    again = backfill_simulated(db, None, START, START + 3 * HOUR, 60.0, chunk=HOUR, fleet=fleet)
    assert (again.skipped, again.total_rows) == (3, 0)
    with Store(str(db)) as store:
        store.con.execute("DELETE FROM ingest_batches")  # even without the bookkeeping: no duplicates
    forced = backfill_simulated(db, None, START, START + 3 * HOUR, 60.0, chunk=HOUR, fleet=fleet)
    assert forced.skipped == 0 and forced.total_rows == 0
    with Store(str(db)) as store:
        assert {t: store.count(t) for t in before} == before


def test_simulated_history_scraped_as_gpulens_text_equals_the_truth(fleet: SimulatedFleet) -> None:
    truth = fleet.history(START, START + 20 * 60, 60.0).frames()
    text = render_text(series_for(truth, "gpulens"), timestamps=True)
    frames = to_store_frames(parse_exposition(text, "sim"), "gpulens", "scrape")
    for table, keys in (("device_samples", ["device_id", "ts"]), ("gpu_samples", ["gpu_uuid", "ts"]),
                        ("allocations", ["device_id", "ts", "namespace", "pod", "container"])):
        want = truth[table].drop("source").sort(keys)
        got = frames[table].select(want.columns).sort(keys)
        assert got.equals(want), table
    devices = frames["devices"].select("device_id", "profile", "gpu_equivalents", "gpu_instance_id").sort("device_id")
    want_dev = truth["devices"].select(devices.columns).sort("device_id")
    assert devices.with_columns(pl.col("gpu_instance_id").cast(pl.Int32)).equals(want_dev)
