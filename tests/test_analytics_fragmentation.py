"""Fragmentation on a hand-built fleet over one hour (two 30-minute buckets).

- node m1: H200 in MIG mode with a 4g.71gb (held by ``alpha``) and a free 2g.35gb; the last compute
  slice is unpartitioned (only 1g.18gb / 1g.35gb still fit there).
- node w1: one whole H200, free all hour.
Bucket 1: ``beta`` waits for a 3g.71gb: nothing free fits it, so m1's 2/7 + 1/7 GE are stranded, and
w1's whole GPU is stranded too (no pending ``gpu`` shape). Bucket 2: ``beta`` waits for a whole GPU:
w1 is usable, m1's 3/7 GE stay stranded.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from tests.support.analytics_fleet import T0, Fleet

B2 = T0 + timedelta(minutes=30)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("m1", mode="mig")
    f.node("w1")
    f.gpu("GPU-M", "m1", mode="mig")
    f.mig("MIG-4g", "GPU-M", "m1", "4g.71gb", gi=1)
    f.mig("MIG-2g", "GPU-M", "m1", "2g.35gb", gi=2)
    f.gpu("GPU-W", "w1")
    for dev in ("MIG-4g", "MIG-2g", "GPU-W"):
        f.samples(dev, count=60, activity=0.3)
    f.alloc("MIG-4g", "alpha", count=60, ge=4 / 7)
    f.pending("beta", "3g.71gb", T0 + timedelta(minutes=5), gpu_model="H200")
    f.pending("beta", "gpu", B2 + timedelta(minutes=5), gpu_model="NVIDIA H200")
    f.close()
    return path


def test_free_capacity_no_pending_shape_fits_is_stranded(store: Path) -> None:
    summary = analyze(
        store, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=T0 + timedelta(hours=1))
    )
    con = duckdb.connect(str(store), read_only=True)
    got = {
        (r[0], r[1]): r[2:]
        for r in con.execute(
            """SELECT bucket_start, node, free_gpus, free_mig_slices, round(free_ge, 6), round(usable_ge, 6),
                      round(stranded_ge, 6), round(stranded_ge_hours, 6), largest_shape, pending_shapes
               FROM fragmentation WHERE run_id = ?""",
            [summary.run_id],
        ).fetchall()
    }
    con.close()
    three_sevenths = round(3 / 7, 6)
    assert got == {
        (T0, "m1"): (0, 3, three_sevenths, 0.0, three_sevenths, round(3 / 14, 6), "2g.35gb", ["3g.71gb@H200"]),
        (T0, "w1"): (1, 0, 1.0, 0.0, 1.0, 0.5, "gpu", ["3g.71gb@H200"]),
        (B2, "m1"): (0, 3, three_sevenths, 0.0, three_sevenths, round(3 / 14, 6), "2g.35gb", ["gpu@H200"]),
        (B2, "w1"): (1, 0, 1.0, 1.0, 0.0, 0.0, "gpu", ["gpu@H200"]),
    }
    assert summary.stranded_ge_hours == pytest.approx(3 / 14 * 2 + 0.5)


def _reasons(path: Path) -> list[tuple[float, str]]:
    summary = analyze(path, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=T0 + timedelta(hours=1)))
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(
            "SELECT DISTINCT stranded_ge, reason FROM fragmentation WHERE run_id = ?", [summary.run_id]
        ).fetchall()
    finally:
        con.close()


def test_without_pending_demand_free_capacity_is_idle_not_stranded(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("w1")
    f.gpu("GPU-W", "w1")
    f.samples("GPU-W", count=60)
    f.con.execute(  # Kueue was collected: its queue had nothing waiting
        "INSERT INTO quota_snapshots (ts, object_kind, object_name, resource, nominal_quota, usage, source) "
        "VALUES (?, 'ClusterQueue', 'team-a', 'nvidia.com/gpu', 8, 0, 'test')", [T0 + timedelta(minutes=5)])
    f.close()
    assert _reasons(path) == [(0.0, "no pending demand: free capacity is idle, not stranded")]


def test_where_no_demand_source_was_collected_the_reason_says_so_not_no_demand(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("w1")
    f.gpu("GPU-W", "w1")
    f.samples("GPU-W", count=60)
    f.close()
    assert _reasons(path) == [
        (0.0, "pending demand not collected (no Kueue metrics or pod inventory): not called stranded")]


def test_a_pending_profile_that_still_fits_the_unpartitioned_slices_is_usable(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("m1", mode="mig")
    f.gpu("GPU-M", "m1", mode="mig")
    f.mig("MIG-4g", "GPU-M", "m1", "4g.71gb", gi=1)
    f.samples("MIG-4g", count=60)
    f.alloc("MIG-4g", "alpha", count=60, ge=4 / 7)
    f.pending("beta", "3g.71gb", T0)
    f.close()
    summary = analyze(path, AnalysisSettings(window_seconds=3600, bucket_seconds=3600, end=T0 + timedelta(hours=1)))
    con = duckdb.connect(str(path), read_only=True)
    row = con.execute(
        "SELECT round(usable_ge, 6), stranded_ge, largest_shape FROM fragmentation WHERE run_id = ?", [summary.run_id]
    ).fetchall()
    con.close()
    assert row == [(round(3 / 7, 6), 0.0, "3g.71gb")]
