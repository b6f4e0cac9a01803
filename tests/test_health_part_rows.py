"""A day part's GPU health rows are what the samples say, however the day part reads them.

``part_health`` (per GPU, over all of its samples in the span, ``up = false`` ones included) and
``part_trend_buckets`` (per GPU and finest bucket aligned to the epoch, over samples of an up GPU; a GPU
whose buckets of the day are all quiet is one ``part_trend_quiet`` row instead) are checked row by row
against a plain reading of the samples, on traces shaped like real ones: bursty
counters that sometimes reset, gaps, counters an older exporter never sent or sent only some of the
time, GPUs lost for a while (``up = false``) or with no ``up`` reading, SM clocks with and without power
readings, a window that starts off the bucket grid, and finest buckets of 5, 15 and 30 minutes. The
inventory plays no part: these stores list no GPU at all, and every GPU with samples has its rows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics import health
from analytics.day_parts import day_windows
from analytics.facts import Window
from analytics.result_tables import create_result_tables
from analytics.settings import EarlyWarningRules, HealthRules
from collector.schema import create_schema
from tests.support.bulk_insert import insert_rows

MIDNIGHT = datetime(2026, 1, 6)
EPOCH = datetime(1970, 1, 1)
COLUMNS = ("up", "power_watts", "sm_clock_hz", "ecc_corrected_total", "ecc_uncorrected_total", "retired_pages_total",
           "remapped_rows_failure", "pcie_replay_total", "nvlink_crc_errors_total", "thermal_violation_seconds_total")
COUNTERS = ("ecc_corrected_total", "ecc_uncorrected_total", "retired_pages_total", "pcie_replay_total",
            "nvlink_crc_errors_total", "thermal_violation_seconds_total")
Sample = dict[str, Any]
"""A GPU sample: ``ts``, ``gpu_uuid`` and the readings of ``COLUMNS`` (None: not sent)."""


def rules_with_finest(seconds: int) -> HealthRules:
    """Default health rules whose finest early-warning bucket is ``seconds`` (300, 900 or 1800), with a
    clock reference that needs only an hour of readings (so short traces have one)."""
    ew = EarlyWarningRules()
    update: dict[str, Any] = {"clock_reference_seconds": 3600}
    for name, rule in ew.rules().items():
        if rule.bucket_seconds < seconds or name == "ecc_corrected_per_hour":
            update[name] = rule.model_copy(update={"bucket_seconds": seconds})
    return HealthRules(early_warning=ew.model_copy(update=update))


@st.composite
def gpu_trace(draw: st.DrawFn, gpu: str, start: datetime, end: datetime) -> list[Sample]:
    sent = {c: draw(st.sampled_from(["always", "always", "never", "sometimes"])) for c in COLUMNS}
    totals = dict.fromkeys(COUNTERS, 0.0)
    out = []
    ts = start + timedelta(seconds=draw(st.integers(0, 600)))
    while ts < end:
        for c in COUNTERS:
            step = draw(st.sampled_from([0, 0, 0, 0, 0, 1, 7, 250, -1]))
            totals[c] = 0.0 if step < 0 else totals[c] + step  # -1: the counter reset (driver reload)
        power = draw(st.sampled_from([90.0, 350.0, 600.0, 700.0]))
        clock = draw(st.sampled_from([0.35e9, 1.2e9, 1.98e9, 1.98e9]))
        reading: Sample = {
            "up": draw(st.sampled_from([True, True, True, True, False])),
            "power_watts": power, "sm_clock_hz": clock,
            "remapped_rows_failure": draw(st.sampled_from([False, False, False, False, True])),
            **{c: (v if c != "thermal_violation_seconds_total" else v / 4) for c, v in totals.items()},
        }
        for c in COLUMNS:
            if sent[c] == "never" or (sent[c] == "sometimes" and draw(st.booleans())):
                reading[c] = None
        out.append({"ts": ts, "gpu_uuid": gpu, **reading})
        ts += timedelta(seconds=draw(st.sampled_from([60, 60, 60, 60, 67, 300, 1800])))
    return out


@st.composite
def traces(draw: st.DrawFn) -> tuple[Window, list[Sample], int]:
    """Three GPUs over a few hours around midnight (the window starting off the bucket grid), a finest bucket."""
    start = MIDNIGHT - timedelta(seconds=draw(st.integers(1800, 4 * 3600)))
    end = MIDNIGHT + timedelta(seconds=draw(st.integers(1800, 4 * 3600)))
    samples = [s for gpu in ("GPU-A", "GPU-B", "GPU-C") for s in draw(gpu_trace(gpu, start, end))]
    return Window(start, end, 300), samples, draw(st.sampled_from([300, 900, 1800]))


def store(samples: list[Sample]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    create_schema(con)
    create_result_tables(con)
    cols = ("ts", "gpu_uuid", *COLUMNS)
    insert_rows(con, "gpu_samples", ("node", "source", *cols), [("n", "test", *(s[c] for c in cols)) for s in samples])
    con.execute("CREATE VIEW f_gpu_samples AS SELECT * FROM gpu_samples")
    return con


def _min(values: list[Any]) -> Any:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def _max(values: list[Any]) -> Any:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _any(values: list[bool | None]) -> bool | None:
    known = [v for v in values if v is not None]
    return any(known) if known else None


def _seconds(ts: datetime) -> float:
    return (ts - EPOCH).total_seconds()


def spec_health(samples: list[Sample], span: Window) -> dict[str, tuple[Any, ...]]:
    """Per GPU with samples in the span: the ``part_health`` columns after ``gpu_uuid``."""
    by_gpu: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        if span.start <= s["ts"] < span.end:
            by_gpu[s["gpu_uuid"]].append(s)
    out = {}
    for gpu, rows in by_gpu.items():
        col = {c: [r[c] for r in rows] for c in COLUMNS}
        ts = [r["ts"] for r in rows]
        crc_min, crc_max = _min(col["nvlink_crc_errors_total"]), _max(col["nvlink_crc_errors_total"])
        rate = None
        if crc_min is not None and crc_max > crc_min:  # the highest 5-minute rate, buckets from the span start
            five: dict[int, list[Sample]] = defaultdict(list)
            for r in rows:
                five[int((r["ts"] - span.start).total_seconds()) // 300].append(r)
            rates = []
            for b in five.values():
                lo, hi = _min([r["nvlink_crc_errors_total"] for r in b]), _max([r["nvlink_crc_errors_total"] for r in b])
                if lo is not None:
                    span_s = _seconds(max(r["ts"] for r in b)) - _seconds(min(r["ts"] for r in b))
                    rates.append((hi - lo) / max(span_s, 1))
            rate = max(rates)
        out[gpu] = (
            _min(col["ecc_uncorrected_total"]), _max(col["ecc_uncorrected_total"]), _max(col["retired_pages_total"]),
            _any(col["remapped_rows_failure"]), _min([r["ts"] for r in rows if r["remapped_rows_failure"]]),
            _any([None if u is None else not u for u in col["up"]]),
            _min([r["ts"] for r in rows if r["up"] is False]), _max([r["ts"] for r in rows if r["up"] is False]),
            _min(col["thermal_violation_seconds_total"]), _max(col["thermal_violation_seconds_total"]),
            crc_min, crc_max, min(ts), max(ts), rate,
            *_onsets([(r["ts"], r["remapped_rows_failure"]) for r in rows]),
            *_onsets([(r["ts"], None if r["up"] is None else not r["up"]) for r in rows]),
        )
    return out


def _onsets(readings: list[tuple[datetime, bool | None]]) -> tuple[Any, ...]:
    """A failure state's first reading after one without it, and the span's first and last readings (None: none)."""
    known = sorted((ts, v) for ts, v in readings if v is not None)
    onset = next((ts for (_, before), (ts, now) in zip(known, known[1:], strict=False) if now and not before), None)
    return onset, known[0][1] if known else None, known[-1][1] if known else None


def quantile_cont(values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (DuckDB's ``quantile_cont``)."""
    x = sorted(values)
    pos = q * (len(x) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(x) - 1)
    return x[lo] + (pos - lo) * (x[hi] - x[lo])


def spec_trends(samples: list[Sample], span: Window, rules: HealthRules) -> dict[tuple[str, datetime], tuple[Any, ...]]:
    """Per GPU and finest bucket (aligned to the epoch) with samples of an up GPU in the span: the
    ``part_trend_buckets`` columns after ``bucket_start``."""
    ew = rules.early_warning
    bucket = ew.finest_trend_bucket_seconds()
    up = [s for s in samples if span.start <= s["ts"] < span.end and s["up"] is not False]
    reference: dict[str, tuple[float, float]] = {}
    for gpu in {s["gpu_uuid"] for s in up}:
        mine = [s for s in up if s["gpu_uuid"] == gpu]
        both = [s["ts"] for s in mine if s["sm_clock_hz"] is not None and s["power_watts"] is not None]
        if both and (max(both) - min(both)).total_seconds() >= ew.clock_reference_seconds:
            reference[gpu] = (quantile_cont([s["sm_clock_hz"] for s in mine if s["sm_clock_hz"] is not None], 0.95),
                              quantile_cont([s["power_watts"] for s in mine if s["power_watts"] is not None], 0.95))
    groups: dict[tuple[str, datetime], list[Sample]] = defaultdict(list)
    for s in up:
        start = EPOCH + timedelta(seconds=int(_seconds(s["ts"])) // bucket * bucket)
        groups[(s["gpu_uuid"], start)].append(s)
    out = {}
    for (gpu, start), rows in groups.items():
        clocked = [r for r in rows if r["sm_clock_hz"] is not None and r["power_watts"] is not None]
        slow = None
        if gpu in reference:
            clk95, pw95 = reference[gpu]
            slow = sum(1 for r in clocked if r["sm_clock_hz"] < ew.clock_drop_ratio * clk95
                       and r["power_watts"] >= ew.clock_drop_power_ratio * pw95)
        out[(gpu, start)] = (
            max(r["ts"] for r in rows), _max([r["ecc_corrected_total"] for r in rows]),
            _max([r["pcie_replay_total"] for r in rows]), _max([r["nvlink_crc_errors_total"] for r in rows]),
            _max([r["thermal_violation_seconds_total"] for r in rows]), len(clocked), slow,
        )
    return out


def spec_quiet(buckets: dict[datetime, tuple[Any, ...]], finest: int) -> tuple[Any, ...] | None:
    """A GPU's ``part_trend_quiet`` row (after ``gpu_uuid``) from its buckets of the span (start -> the
    ``part_trend_buckets`` columns after ``bucket_start``), or None when they are not all quiet: a bucket at
    every finest step from its first to its last, each counter None in all or the same in all, and clock
    drops None in all, or every bucket with clock readings and no drop."""
    starts = sorted(buckets)
    rows = [buckets[b] for b in starts]
    if len(starts) != (starts[-1] - starts[0]).total_seconds() // finest + 1:
        return None
    steady = []
    for column in range(1, 5):
        values = {r[column] for r in rows}
        if len(values) != 1:
            return None
        steady.extend(values)
    clocks, drops = [r[5] for r in rows], [r[6] for r in rows]
    if not (max(clocks) == 0 or all(d is None for d in drops) or (min(clocks) > 0 and all(d == 0 for d in drops))):
        return None
    dropped = None if all(d is None for d in drops) else max(d for d in drops if d is not None)
    return (starts[0], starts[-1], rows[0][0], rows[-1][0], *steady, sum(clocks), dropped)


def _same(got: tuple[Any, ...], want: tuple[Any, ...]) -> bool:
    return all(
        (g is None and w is None) or (isinstance(w, float) and g is not None and math.isclose(g, w, rel_tol=1e-12))
        or g == w
        for g, w in zip(got, want, strict=True)
    )


# Each example builds a store and computes two day parts (the window always crosses midnight): 20 drawn
# windows of three GPUs draw each finest bucket (5, 15, 30 minutes) several times.
@settings(max_examples=20, deadline=None)
@given(traces())
def test_day_part_health_rows_are_what_the_samples_say(trace: tuple[Window, list[Sample], int]) -> None:
    window, samples, finest = trace
    rules = rules_with_finest(finest)
    con = store(samples)
    for n, span in enumerate(day_windows(window)):
        health.insert_part_health(con, f"p{n}", span, rules)
        rows = con.execute("SELECT * EXCLUDE (part_id) FROM part_health WHERE part_id = ?", [f"p{n}"]).fetchall()
        got = {r[0]: r[1:] for r in rows}
        want = spec_health(samples, span)
        assert got.keys() == want.keys() and len(rows) == len(got)
        for gpu, row in want.items():
            assert _same(got[gpu], row), (gpu, got[gpu], row)
        per_gpu: dict[str, dict[datetime, tuple[Any, ...]]] = defaultdict(dict)
        for (gpu, start), row in spec_trends(samples, span, rules).items():
            per_gpu[gpu][start] = row
        quiet = {gpu: q for gpu, buckets in per_gpu.items() if (q := spec_quiet(buckets, finest)) is not None}
        rows = con.execute("SELECT * EXCLUDE (part_id) FROM part_trend_quiet WHERE part_id = ?", [f"p{n}"]).fetchall()
        got_q = {r[0]: r[1:] for r in rows}
        assert got_q.keys() == quiet.keys() and len(rows) == len(got_q)
        for gpu, row in quiet.items():
            assert _same(got_q[gpu], row), (gpu, got_q[gpu], row)
        rows = con.execute("SELECT * EXCLUDE (part_id) FROM part_trend_buckets WHERE part_id = ?", [f"p{n}"]).fetchall()
        got_b = {(r[0], r[1]): r[2:] for r in rows}
        want_b = {(gpu, start): row for gpu, buckets in per_gpu.items() if gpu not in quiet
                  for start, row in buckets.items()}
        assert got_b.keys() == want_b.keys() and len(rows) == len(got_b)
        for key, row in want_b.items():
            assert _same(got_b[key], row), (key, got_b[key], row)
    assert not con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall(), "no temp table left"


def test_a_day_without_gpu_samples_stores_no_health_rows() -> None:
    con = store([{"ts": MIDNIGHT - timedelta(hours=1), "gpu_uuid": "GPU-A", **dict.fromkeys(COLUMNS, None)}])
    health.insert_part_health(con, "empty", Window(MIDNIGHT, MIDNIGHT + timedelta(hours=2), 300), HealthRules())
    assert con.execute("SELECT count(*) FROM part_health").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM part_trend_buckets").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM part_trend_quiet").fetchone() == (0,)
    assert not con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
