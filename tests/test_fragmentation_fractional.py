"""Free and stranded capacity on GPUs that fractional holders and shared replicas hold in part.

A hand-built sharing cluster over one hour (two 30-minute buckets), shaped like public GPU-sharing traces
(most holders at 0.3-0.8 of a GPU, pending requests of mixed shapes). Every GPU has 100 GiB of memory.

- node s1 (fractional holders): GPU-A held 0.47 + 0.32 (free 0.21), GPU-B 0.81 (free 0.19), GPU-C 0.65 +
  0.30 (free 0.05), GPU-D 0.5 in the first bucket only (free 0.5, then the whole GPU);
- node t1: GPU-T time-sliced into 4 replicas, 2 of them held by one tenant's two pods (free 0.5 = 2 replicas);
- node w1: GPU-W held whole (nothing free, no row).

Bucket 1 pending: a pod asking for 0.2 of a GPU and a Kueue workload asking for a whole GPU. 0.2 fits A (0.21)
and D (0.5); the whole-GPU request takes a free replica of T; B (0.19) and C (0.05) fit nothing:
s1 free 0.95, usable 0.71, stranded 0.24 (0.12 GE-hours); t1 free 0.5, all usable.
Bucket 2 pending: a gpushare pod asking for 40 GiB and a pod asking for 0.6. Only a whole free D has 40 GiB
and 0.6 on s1 (A has 21 GiB free, B 19, C 5); T's free half has 50 GiB: s1 free 1.45, usable 1.0, stranded
0.45 (0.225 GE-hours); t1 free 0.5, all usable.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from collector.inventory import SHARE_KEY, SHARE_MEMORY_KEY
from tests.support.analytics_fleet import GIB, T0, Fleet

B2 = T0 + timedelta(minutes=30)


def _pending_pod(f: Fleet, name: str, ts: object, requests: dict[str, float]) -> None:
    f.con.execute(
        """INSERT INTO pod_snapshots (ts, namespace, pod, phase, tenant, gpu_requests, source)
           VALUES (?, 'share', ?, 'Pending', 'gamma', ?, 'kubernetes')""",
        [ts, name, json.dumps(requests)],
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    for node in ("s1", "t1", "w1"):
        f.node(node, mode="time-slicing" if node == "t1" else "exclusive")
    for gpu in ("GPU-A", "GPU-B", "GPU-C", "GPU-D"):
        f.gpu(gpu, "s1")
    f.gpu("GPU-T", "t1", mode="time-slicing", replicas=4)
    f.gpu("GPU-W", "w1")
    f.con.execute("UPDATE devices SET memory_total_bytes = ?", [100 * GIB])
    for gpu in ("GPU-A", "GPU-B", "GPU-C", "GPU-D", "GPU-T", "GPU-W"):
        f.samples(gpu, count=60, activity=0.4)
    f.alloc("GPU-A", "alpha", pod="milli-470", ge=0.47)
    f.alloc("GPU-A", "beta", pod="milli-320", ge=0.32)
    f.alloc("GPU-B", "alpha", pod="milli-810", ge=0.81)
    f.alloc("GPU-C", "beta", pod="milli-650", ge=0.65)
    f.alloc("GPU-C", "alpha", pod="hami-30", ge=0.30)
    f.alloc("GPU-D", "beta", pod="kai-half", ge=0.5, count=30)
    f.alloc("GPU-T", "delta", pod="replica-0", ge=0.25)
    f.alloc("GPU-T", "delta", pod="replica-1", ge=0.25)
    f.alloc("GPU-W", "alpha", pod="whole")
    _pending_pod(f, "milli-200", T0 + timedelta(minutes=5), {"alibabacloud.com/gpu-milli": 200, SHARE_KEY: 0.2})
    f.pending("beta", "gpu", T0 + timedelta(minutes=5))
    _pending_pod(f, "gpushare-40g", B2 + timedelta(minutes=5),
                 {"aliyun.com/gpu-mem": 40, SHARE_MEMORY_KEY: 40 * GIB})
    _pending_pod(f, "kai-0.6", B2 + timedelta(minutes=5), {"gpu-fraction": 0.6, SHARE_KEY: 0.6})
    f.close()
    return path


def test_the_free_part_of_partly_held_gpus_is_free_capacity_and_stranded_where_no_pending_shape_fits(
        store: Path) -> None:
    summary = analyze(store, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=T0 + timedelta(hours=1)))
    con = duckdb.connect(str(store), read_only=True)
    got = {
        (r[0], r[1]): r[2:]
        for r in con.execute(
            """SELECT bucket_start, node, free_gpus, round(free_ge, 6), round(usable_ge, 6), round(stranded_ge, 6),
                      round(stranded_ge_hours, 6)
               FROM fragmentation WHERE run_id = ?""",
            [summary.run_id],
        ).fetchall()
    }
    con.close()
    assert got == {
        (T0, "s1"): (0, 0.95, 0.71, 0.24, 0.12),
        (T0, "t1"): (0, 0.5, 0.5, 0.0, 0.0),
        (B2, "s1"): (1, 1.45, 1.0, 0.45, 0.225),
        (B2, "t1"): (0, 0.5, 0.5, 0.0, 0.0),
    }
    assert summary.stranded_ge_hours == pytest.approx(0.12 + 0.225)


def test_pending_fractions_are_listed_as_shapes_with_their_share_and_memory(store: Path) -> None:
    summary = analyze(store, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=T0 + timedelta(hours=1)))
    con = duckdb.connect(str(store), read_only=True)
    shapes = dict(con.execute(
        "SELECT DISTINCT bucket_start, pending_shapes FROM fragmentation WHERE run_id = ? AND node = 's1'",
        [summary.run_id]).fetchall())
    con.close()
    assert shapes == {T0: ["fraction:0.2:", "gpu"], B2: ["fraction:0.6:", f"fraction::{40 * GIB}"]}


def test_each_fractional_holder_pays_its_part_and_the_lines_add_up_to_the_gpus_cost(store: Path) -> None:
    f = Fleet(store)
    f.price("H200", 10.0)
    f.close()
    summary = analyze(store, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=T0 + timedelta(hours=1)))
    con = duckdb.connect(str(store), read_only=True)
    lines = dict(con.execute(
        """SELECT "SubAccountId", CAST(sum("BilledCost") AS DOUBLE) FROM chargeback WHERE run_id = ? GROUP BY 1""",
        [summary.run_id]).fetchall())
    con.close()
    # alpha 0.47 + 0.81 + 0.30 + 1 (GPU-W), beta 0.32 + 0.65 + 0.5 for half an hour, delta 2 replicas of 4;
    # the free parts (0.21 + 0.19 + 0.05 + 0.75 + 0.5 GE-hours) stay unallocated: 6 GPUs x 1 h x $10 in all
    assert lines == {"alpha": 25.8, "beta": 12.2, "delta": 5.0, "__unallocated__": 17.0}


def test_a_queues_pending_fraction_of_unknown_size_never_makes_a_free_part_stranded(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("s1")
    f.gpu("GPU-A", "s1")
    f.samples("GPU-A", count=30, activity=0.4)
    f.alloc("GPU-A", "alpha", pod="milli-600", ge=0.6, count=30)
    f.pending("share", "fraction", T0 + timedelta(minutes=5))  # Kueue's sum of HAMi cores: no size
    f.close()
    summary = analyze(path, AnalysisSettings(window_seconds=1800, bucket_seconds=1800, end=T0 + timedelta(minutes=30)))
    con = duckdb.connect(str(path), read_only=True)
    got = con.execute("SELECT round(free_ge, 6), round(usable_ge, 6), stranded_ge, pending_shapes FROM fragmentation "
                      "WHERE run_id = ?", [summary.run_id]).fetchall()
    con.close()
    assert got == [(0.4, 0.4, 0.0, ["fraction"])]
