"""The ``idle_capacity`` rows themselves: one per device, bucket, tenant and state, none for a state without hours.

Fixture: one time-sliced H200 (two replicas of 0.5 GE) over one hour, one 60-minute bucket, scraped every
minute: minutes 0-19 idle (1 %), 20-39 busy (70 %), 40-59 an exporter without the activity field (NaN).
Tenant ``chat`` holds it from two namespaces: pod ``a`` in ``chat-a`` all hour, pod ``b`` in ``chat-b`` for
minutes 0-29. Each pod's minutes take the class of the sample at their own minute:

- allocated-idle: 0.5 x 20 min (a) + 0.5 x 20 min (b) = 1/3 GE-h, 40 samples;
- allocated-active: 0.5 x 20 min (a) + 0.5 x 10 min (b) = 1/4 GE-h, 30 samples;
- allocated-unmeasured: 0.5 x 20 min (a) = 1/6 GE-h, 20 samples;
- unallocated: 1 GE-h measured - 3/4 held = 1/4 GE-h; unknown: none (every minute reported), so no row.
"""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from tests.support.analytics_fleet import T0, Fleet

END = T0 + timedelta(hours=1)


def _activity(minute: int) -> float:
    return 0.01 if minute < 20 else 0.7 if minute < 40 else math.nan


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n0", mode="time-slicing")
    f.gpu("GPU-0", "n0", mode="time-slicing", replicas=2)
    f.samples("GPU-0", count=60, activity=_activity)
    f.alloc("GPU-0", "chat", count=60, namespace="chat-a", pod="a", ge=0.5)
    f.alloc("GPU-0", "chat", count=30, namespace="chat-b", pod="b", ge=0.5)
    f.close()
    analyze(path, AnalysisSettings(window_seconds="1h", bucket_seconds="1h", end=END, sample_interval_seconds=60))
    return path


def _rows(path: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_tenant_holding_a_device_from_two_namespaces_gets_one_row_per_state_with_both(store: Path) -> None:
    got = _rows(store, "SELECT tenant, state, ge_hours, samples FROM idle_capacity ORDER BY state")
    assert [(t, s, n) for t, s, _, n in got] == [
        ("chat", "allocated-active", 30),
        ("chat", "allocated-idle", 40),
        ("chat", "allocated-unmeasured", 20),
        (None, "unallocated", 60),
    ]
    hours = {s: h for _, s, h, _ in got}
    assert hours["allocated-idle"] == pytest.approx(1 / 3)
    assert hours["allocated-active"] == pytest.approx(1 / 4)
    assert hours["allocated-unmeasured"] == pytest.approx(1 / 6)
    assert hours["unallocated"] == pytest.approx(1 / 4)


def test_a_state_without_hours_writes_no_row(store: Path) -> None:
    """Every minute reported, so no ``unknown`` row; no row anywhere carries zero hours."""
    assert _rows(store, "SELECT count(*) FROM idle_capacity WHERE state = 'unknown' OR ge_hours <= 0") == [(0,)]


def test_each_namespace_that_held_the_device_is_listed_once(store: Path) -> None:
    assert _rows(store, "SELECT device_id, tenant, namespace FROM part_tenancy ORDER BY ALL") == [
        ("GPU-0", "chat", "chat-a"),
        ("GPU-0", "chat", "chat-b"),
    ]
