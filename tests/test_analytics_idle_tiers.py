"""Whichever tier decides a bucket, each allocation row counts the class of the device sample at its own time.

The idle tiers (whole bucket, a holder's span, row by row) are shortcuts of one rule: an allocation row
takes the class of the device sample at its own time, and a row with no sample at its time is not measured.
These fixtures are shaped to break a shortcut that cuts a bucket at the wrong time: pods arriving at a
bucket's first sample or leaving at its last, two pods with the same first or last minute, a pod leaving
and coming back inside a bucket, failed scrapes inside a pod's span (with and without its allocation row),
allocation rows off the device's scrape second, and two pods of one tenant on a time-sliced GPU. The
figures compared are the ``samples`` of every ``idle_capacity`` row (whole numbers: a wrong cut is off by
at least one), against the rule applied row by row in Python.
"""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from tests.support.analytics_fleet import T0, Fleet

MINUTES = 120
THRESHOLD = 0.05
PODS = (("chat", "a"), ("chat", "b"), ("embed", "c"))
"""(tenant, pod): two pods of one tenant (k = 2 when both hold) and another tenant."""


@dataclass(frozen=True)
class Stay:
    """A pod on the GPU from ``start`` for ``minutes`` (its allocation rows, one per minute)."""

    pod: int
    start: int
    minutes: int
    off_phase: bool = False
    """Rows 20 s after the device's scrape second: no device sample at their times."""


@dataclass(frozen=True)
class Trace:
    """One time-sliced GPU: what each minute's scrape reported (``gap``: no device sample) and who held it."""

    readings: tuple[str, ...]
    stays: tuple[Stay, ...]
    offset: int


_READING = st.sampled_from(["idle", "idle", "idle", "busy", "busy", "edge", "nan", "null", "gap"])
_START = st.one_of(st.sampled_from([0, 5, 59, 60, 61, 65, 119]), st.integers(0, MINUTES - 1))
stays = st.builds(Stay, pod=st.integers(0, len(PODS) - 1), start=_START,
                  minutes=st.one_of(st.sampled_from([1, 5, 55, 60, 61]), st.integers(1, MINUTES)),
                  off_phase=st.sampled_from([False, False, False, False, True]))
traces = st.builds(
    Trace,
    readings=st.lists(_READING, min_size=MINUTES, max_size=MINUTES).map(tuple),
    stays=st.lists(stays, min_size=0, max_size=6).map(tuple),
    offset=st.integers(0, 59),
)


def _activity(reading: str, minute: int) -> float | None:
    return {
        "idle": (minute % 5) / 100,
        "busy": 0.3 + (minute % 7) / 10,
        "edge": THRESHOLD,
        "nan": math.nan,
        "null": None,
    }[reading]


def _state(activity: float | None) -> str:
    if activity is None or not math.isfinite(activity):
        return "allocated-unmeasured"
    return "allocated-idle" if activity < THRESHOLD else "allocated-active"


def build(path: Path, gpus: list[Trace], bucket_minutes: list[int]) -> dict[int, Counter[tuple[str, datetime, str, str]]]:
    """The store, and per bucket length the expected samples per (device, bucket start, tenant, state)."""
    f = Fleet(path)
    f.node("n0", mode="time-slicing")
    expected: dict[int, Counter[tuple[str, datetime, str, str]]] = {b: Counter() for b in bucket_minutes}
    for g, trace in enumerate(gpus):
        device = f"GPU-{g}"
        f.gpu(device, "n0", mode="time-slicing", replicas=2)
        sampled: dict[datetime, float | None] = {}
        for minute, reading in enumerate(trace.readings):
            ts = T0 + timedelta(minutes=minute, seconds=trace.offset)
            if reading != "gap":
                sampled[ts] = _activity(reading, minute)
        f.readings(device, [(ts, activity, None) for ts, activity in sampled.items()])  # one insert per GPU
        holders: list[tuple[datetime, str, str, str, float]] = []
        held: set[tuple[int, datetime]] = set()
        for stay in trace.stays:
            tenant, pod = PODS[stay.pod]
            for minute in range(stay.start, min(stay.start + stay.minutes, MINUTES)):
                ts = T0 + timedelta(minutes=minute, seconds=trace.offset + (20 if stay.off_phase else 0))
                if (stay.pod, ts) in held:  # overlapping stays of one pod are one row (the fact table's key)
                    continue
                held.add((stay.pod, ts))
                holders.append((ts, tenant, tenant, pod, 0.5))
                if ts not in sampled:
                    continue
                for b in bucket_minutes:
                    start = T0 + timedelta(minutes=(ts - T0) // timedelta(minutes=b) * b)
                    expected[b][(device, start, tenant, _state(sampled[ts]))] += 1
        f.holders(device, holders)
    f.close()
    return expected


def held_samples(path: Path, bucket_minutes: int) -> Counter[tuple[str, datetime, str, str]]:
    """``samples`` of the allocated ``idle_capacity`` rows of a 2-hour analysis with buckets of ``bucket_minutes``."""
    summary = analyze(
        path,
        AnalysisSettings(window_seconds="2h", bucket_seconds=f"{bucket_minutes}m", end=T0 + timedelta(minutes=MINUTES),
                         activity_threshold=THRESHOLD, sample_interval_seconds=60),
    )
    con = duckdb.connect(str(path), read_only=True)
    rows = con.execute(
        """SELECT device_id, bucket_start, tenant, state, sum(samples) FROM idle_capacity
           WHERE run_id = ? AND state LIKE 'allocated-%' GROUP BY ALL""",
        [summary.run_id],
    ).fetchall()
    con.close()
    return Counter({(d, b, t, s): int(n) for d, b, t, s, n in rows if n})


def _quiet(readings: str = "idle") -> tuple[str, ...]:
    return tuple(readings for _ in range(MINUTES))


_BUSY_FROM_30 = tuple("idle" if m % 60 < 30 else "busy" for m in range(MINUTES))


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gpus=st.lists(traces, min_size=1, max_size=3))
# A pod arriving at a bucket's first sample (minute 60) while another leaves at the last one (minute 59).
@example(gpus=[Trace(_BUSY_FROM_30, (Stay(0, 0, 60), Stay(2, 60, 60)), 7)])
# Two pods with the same first minute and the same last minute, one tenant (k = 2), inside one bucket.
@example(gpus=[Trace(_BUSY_FROM_30, (Stay(0, 12, 30), Stay(1, 12, 30), Stay(2, 0, 120)), 0)])
# Same last minute, different first minutes; and a pod arriving the minute another leaves.
@example(gpus=[Trace(_BUSY_FROM_30, (Stay(0, 5, 40), Stay(2, 20, 25), Stay(1, 45, 75)), 59)])
# A pod leaving and coming back inside one bucket (twice the same tenant's pod).
@example(gpus=[Trace(_BUSY_FROM_30, (Stay(0, 0, 20), Stay(0, 40, 50)), 3)])
# Failed scrapes inside a pod's span: no device sample at minutes 10-14, the pod's rows still there.
@example(gpus=[Trace(tuple("gap" if 10 <= m < 15 else r for m, r in enumerate(_BUSY_FROM_30)), (Stay(0, 5, 100),), 30)])
# A failed scrape (no sample, no row) inside a pod's span: the pod's rows skip it as the samples do.
@example(gpus=[Trace(tuple("gap" if m == 33 else r for m, r in enumerate(_BUSY_FROM_30)), (Stay(0, 20, 33), Stay(0, 34, 20)), 11)])
# Rows off the scrape second (no sample at their time) next to rows on it; NaN and missing readings.
@example(gpus=[Trace(tuple("nan" if m % 9 == 0 else "null" if m % 11 == 0 else r for m, r in enumerate(_BUSY_FROM_30)),
                     (Stay(0, 0, 120, off_phase=True), Stay(2, 30, 30)), 15)])
def test_every_held_sample_counts_the_class_of_the_device_sample_at_its_own_time(gpus: list[Trace]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.duckdb"
        expected = build(path, gpus, [60, 10])
        for bucket in (60, 10):
            assert held_samples(path, bucket) == +expected[bucket], bucket
