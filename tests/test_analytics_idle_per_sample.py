"""Idle is decided per sample, never per bucket mean: the bucket size changes no idle figure.

Fixtures are shaped like bursty LLM-serving pods scraped as dcgm-exporter series at about 60 s: each
GPU is scraped at its own second of the minute, sits near 0 % activity with bursts of a few busy
minutes, loses scrapes now and then (no sample, no allocation row), reports NaN or no activity for
a while (an exporter version without the field), and pods come and go at any minute.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from tests.support.analytics_fleet import T0, Fleet

HOURS = 2
MINUTES = HOURS * 60
END = T0 + timedelta(hours=HOURS)
THRESHOLD = 0.05


@dataclass(frozen=True)
class Segment:
    """A run of minutes on one GPU: what the GPU reported and who held it."""

    minutes: int
    reading: str
    """``idle`` (0..4 % activity), ``busy`` (30..100 %), ``edge`` (exactly the threshold), ``nan``,
    ``inf``, ``null`` (no activity field), ``gap`` (the scrape failed: no sample, no holder) or ``orphan``
    (the holder's row came but the device sample did not: not measured time)."""
    holder: str | None


READINGS = ("idle", "busy", "edge", "nan", "inf", "null", "gap", "orphan")
segment = st.builds(
    Segment,
    minutes=st.integers(1, 12),
    reading=st.sampled_from(["idle", "idle", "idle", "busy", "busy", "edge", "nan", "inf", "null", "gap", "orphan"]),
    holder=st.sampled_from([None, "chat", "chat", "embed", "batch"]),
)
trace = st.lists(segment, min_size=1, max_size=30)


def _activity(reading: str, i: int) -> float | None:
    return {
        "idle": (i % 5) / 100,
        "busy": 0.3 + (i % 8) / 10,
        "edge": THRESHOLD,
        "nan": math.nan,
        "inf": math.inf,
        "null": None,
    }[reading]


@dataclass
class Held:
    """What the raw trace says, sample by sample (the expected figures)."""

    held_ge_hours: float = 0.0
    idle_ge_hours: float = 0.0
    unmeasured_ge_hours: float = 0.0


def build(path: Path, traces: list[list[Segment]], offsets: list[int]) -> Held:
    """One exclusive H200 per trace, scraped every 60 s at its own second; returns the expected figures."""
    f = Fleet(path)
    f.node("n0")
    held = Held()
    for g, (segments, offset) in enumerate(zip(traces, offsets, strict=True)):
        device = f"GPU-{g}"
        f.gpu(device, "n0")
        readings: list[tuple[datetime, float | None, int | None]] = []
        holders: list[tuple[datetime, str, str, str, float]] = []
        minute = 0
        for seg in segments:
            for i in range(seg.minutes):
                if minute >= MINUTES:
                    break
                ts = T0 + timedelta(minutes=minute, seconds=offset)
                minute += 1
                if seg.reading == "gap":
                    continue
                if seg.reading == "orphan":
                    if seg.holder is not None:
                        holders.append((ts, seg.holder, seg.holder, f"{seg.holder}-{g}", 1.0))
                    continue
                activity = _activity(seg.reading, minute + i)
                readings.append((ts, activity, None))
                if seg.holder is None:
                    continue
                holders.append((ts, seg.holder, seg.holder, f"{seg.holder}-{g}", 1.0))
                held.held_ge_hours += 1 / 60
                if activity is None or not math.isfinite(activity):
                    held.unmeasured_ge_hours += 1 / 60
                elif activity < THRESHOLD:
                    held.idle_ge_hours += 1 / 60
        f.readings(device, readings)  # the trace's rows in one insert each, not one per minute
        f.holders(device, holders)
    f.close()
    return held


def states(path: Path, bucket: str) -> dict[str, float]:
    summary = analyze(
        path,
        AnalysisSettings(window_seconds=f"{HOURS}h", bucket_seconds=bucket, end=END, activity_threshold=THRESHOLD,
                         sample_interval_seconds=60),
    )
    return summary.ge_hours_by_state


def one_bucket(path: Path, *, minutes: int) -> dict[str, float]:
    """GE-hours by state of the one bucket of ``minutes`` from T0 (samples stand for 60 s each)."""
    span = f"{minutes}m"
    return analyze(
        path,
        AnalysisSettings(window_seconds=span, bucket_seconds=span, end=T0 + timedelta(minutes=minutes),
                         sample_interval_seconds=60),
    ).ge_hours_by_state


EVERY_READING = [Segment(m, r, h) for m, r in zip((3, 7, 1, 5, 12, 2, 11, 9), READINGS, strict=True)
                 for h in (None, "chat")]
"""Each kind of reading, held and not held, in runs of 1..12 minutes that end off the 5-minute grid."""


# Each example analyses its store three times, so the examples are few: 6 drawn fleets of up to 3 GPUs,
# plus one whose 3 GPUs (scraped at seconds 0, 17, 59) hold every kind of reading, held and not.
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces=st.lists(trace, min_size=1, max_size=3), offsets=st.lists(st.integers(0, 59), min_size=3, max_size=3))
@example(traces=[EVERY_READING, EVERY_READING[::-1], EVERY_READING[5:] + EVERY_READING[:5]], offsets=[0, 17, 59])
def test_idle_ge_hours_do_not_depend_on_the_bucket_and_equal_the_held_sample_time_below_threshold(
    traces: list[list[Segment]], offsets: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.duckdb"
        expected = build(path, traces, offsets[: len(traces)])
        by_bucket = {bucket: states(path, bucket) for bucket in ("1m", "5m", "1h")}
    held = expected.held_ge_hours
    for bucket, got in by_bucket.items():
        idle = got.get("allocated-idle", 0.0)
        got_held = sum(got.get(s, 0.0) for s in ("allocated-idle", "allocated-active", "allocated-unmeasured"))
        assert got_held == pytest.approx(held, abs=1e-9), bucket
        assert idle == pytest.approx(expected.idle_ge_hours, abs=1e-9), bucket
        assert got.get("allocated-unmeasured", 0.0) == pytest.approx(expected.unmeasured_ge_hours, abs=1e-9), bucket
        if held:
            assert idle / held == pytest.approx(expected.idle_ge_hours / held, abs=1e-9), bucket
    idles = [got.get("allocated-idle", 0.0) for got in by_bucket.values()]
    assert max(idles) - min(idles) < 0.005 * held + 1e-12


def test_one_busy_minute_does_not_make_a_five_minute_bucket_active(tmp_path: Path) -> None:
    """The issue's example: four idle minutes and one at 100 % are 4 idle and 1 active minute, not 5 active."""
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n0")
    f.gpu("GPU-0", "n0")
    f.samples("GPU-0", count=5, activity=lambda i: 1.0 if i == 2 else 0.0)
    f.alloc("GPU-0", "chat", count=5)
    f.close()
    got = one_bucket(path, minutes=5)
    assert got["allocated-idle"] == pytest.approx(4 / 60)
    assert got["allocated-active"] == pytest.approx(1 / 60)


@pytest.mark.parametrize("reading", [math.nan, math.inf, -math.inf])
def test_a_nan_or_infinite_activity_reading_is_unmeasured_never_active_or_idle(tmp_path: Path, reading: float) -> None:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n0")
    f.gpu("GPU-0", "n0")
    f.samples("GPU-0", count=5, activity=lambda i: reading if i < 3 else 0.5)
    f.alloc("GPU-0", "chat", count=5)
    f.close()
    summary = analyze(
        path,
        AnalysisSettings(window_seconds="5m", bucket_seconds="5m", end=T0 + timedelta(minutes=5),
                         sample_interval_seconds=60),
    )
    got = summary.ge_hours_by_state
    assert got["allocated-unmeasured"] == pytest.approx(3 / 60)
    assert got["allocated-active"] == pytest.approx(2 / 60)
    assert "allocated-idle" not in got
    con = duckdb.connect(str(path), read_only=True)
    samples = con.execute(
        "SELECT state, sum(samples) FROM idle_capacity WHERE run_id = ? AND tenant IS NOT NULL GROUP BY state",
        [summary.run_id],
    ).fetchall()
    con.close()
    assert dict(samples) == {"allocated-unmeasured": 3, "allocated-active": 2}


@pytest.mark.parametrize("few_devices", [2000, 0], ids=["read-by-device-id", "read-every-device"])
def test_a_holder_with_as_many_rows_as_samples_but_at_other_times_is_decided_row_by_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, few_devices: int
) -> None:
    """In one hour the device misses its sample at minute 10 (the holder's row is there) and the holder is
    absent at minute 50 (the only idle sample): equal counts, different times. The holder held 58 measured
    minutes, none idle; minute 10 is not measured and minute 50 is unallocated."""
    monkeypatch.setattr("analytics.idle._FEW_DEVICES", few_devices)
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n0")
    f.gpu("GPU-0", "n0")
    for minute in range(60):
        ts = T0 + timedelta(minutes=minute)
        if minute != 10:
            f.samples("GPU-0", start=ts, count=1, activity=0.01 if minute == 50 else 0.6)
        if minute != 50:
            f.alloc("GPU-0", "chat", start=ts, count=1)
    f.close()
    got = one_bucket(path, minutes=60)
    assert got["allocated-active"] == pytest.approx(58 / 60)
    assert "allocated-idle" not in got
    assert got["unallocated"] == pytest.approx(1 / 60)
    assert got["unknown"] == pytest.approx(1 / 60)


@pytest.mark.parametrize(
    ("second_pod_start", "second_pod_count"),
    [(0, 60), (20, 40), (20, 30)],
    ids=["two-pods-all-hour", "second-pod-arrives-at-20", "second-pod-leaves-at-50"],
)
def test_two_pods_of_one_tenant_on_a_shared_gpu_count_every_row_by_its_own_sample(
    tmp_path: Path, second_pod_start: int, second_pod_count: int
) -> None:
    """Time-sliced GPU, one tenant, two pods of 0.5 GE: the first all hour, the second for part of it (or
    all of it). Minutes 0-29 are idle, 30-59 busy. Each pod's rows take the class of the sample at their
    own minute, whichever way the analysis gets there."""
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n0", mode="time-slicing")
    f.gpu("GPU-0", "n0", mode="time-slicing", replicas=2)
    f.samples("GPU-0", count=60, activity=lambda i: 0.01 if i < 30 else 0.7)
    f.alloc("GPU-0", "chat", count=60, pod="a", ge=0.5)
    f.alloc("GPU-0", "chat", start=T0 + timedelta(minutes=second_pod_start), count=second_pod_count, pod="b", ge=0.5)
    f.close()
    got = one_bucket(path, minutes=60)
    second = range(second_pod_start, second_pod_start + second_pod_count)
    idle_minutes = 30 + sum(1 for m in second if m < 30)
    active_minutes = 30 + sum(1 for m in second if m >= 30)
    assert got["allocated-idle"] == pytest.approx(0.5 * idle_minutes / 60)
    assert got["allocated-active"] == pytest.approx(0.5 * active_minutes / 60)
