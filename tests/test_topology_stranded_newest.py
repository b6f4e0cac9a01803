"""Stranded by topology counts a GPU free exactly as its newest sample says, wherever in the window that sample is.

The fleet's newest GPU sample of the window sets the time; a GPU counts when its own newest sample is at most
``FRESH_SECONDS`` older (a silent GPU is unknown, not free), and is free there when it is up (or its up state was
not reported) and nobody holds it at that very sample. Each UTC day of the window is a day part that stores its
GPUs' last samples (``part_gpu_last``); the window reads those. These tests state the rule in plain Python and
check it on two days shaped like real ones: the newest samples in the window's last minutes, a GPU that went
silent, samples that stop hours before the window's end, a GPU last sampled just before midnight while the
fleet's newest is just after it, a sample after the window (never the newest), holders at other times than the
GPU's newest sample.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb
from hypothesis import example, given, settings
from hypothesis import strategies as st

from analytics import gpu_day
from analytics.day_parts import day_windows
from analytics.facts import Window, bind_facts
from analytics.placement.spread import GpuPlace, place_keys
from analytics.placement.stranded import FRESH_SECONDS, LAST_OF_WINDOW, insert_part_last, stranded_by_topology
from analytics.result_tables import create_result_tables
from collector.schema import create_schema
from tests.support.bulk_insert import insert_rows

START = datetime(2026, 3, 1)
END = START + timedelta(days=2)
GPUS = ("GPU-0", "GPU-1", "GPU-2", "GPU-3")
PLACES = {g: GpuPlace(g, "n1", "H100", place_keys("n1", 0, f"nv-{g}", {})) for g in GPUS}
"""One node, each GPU its own NVLink domain: the NVLink rows name exactly the free GPUs."""

Sample = tuple[int, bool | None, bool]
"""Minutes before the window's end (negative: after it), up (None: not reported), held at that sample."""

samples = st.dictionaries(
    st.sampled_from(GPUS),
    st.dictionaries(st.integers(-2, 1500), st.tuples(st.sampled_from([True, False, None]), st.booleans()),
                    max_size=6),
    max_size=len(GPUS),
)


def _store(readings: dict[str, dict[int, tuple[bool | None, bool]]]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    create_schema(con)
    holders = []
    for gpu, by_minute in readings.items():
        for minutes, (up, held) in by_minute.items():
            ts = END - timedelta(minutes=minutes)
            con.execute("INSERT INTO gpu_samples (ts, node, gpu_uuid, up, source) VALUES (?, 'n1', ?, ?, 't')",
                        [ts, gpu, up])
            if held:
                holders.append((ts, "n1", gpu, gpu, "ns", "p", "c", "t", "exclusive", 1.0, "t"))
    insert_rows(con, "allocations", ("ts", "node", "gpu_uuid", "device_id", "namespace", "pod", "container", "tenant",
                                     "sharing_mode", "gpu_equivalents", "source"), holders)
    bind_facts(con, None, temporary=True)
    create_result_tables(con)
    return con


def _window_states(con: duckdb.DuckDBPyConnection, window: Window) -> None:
    """The window's day parts store their GPUs' last samples; ``an_gpu_last`` merges them, as ``analyze`` does."""
    ids = []
    for n, span in enumerate(day_windows(window)):
        with gpu_day.built(con, span):
            insert_part_last(con, f"p{n}", span)
        ids.append(f"p{n}")
    con.execute(LAST_OF_WINDOW, {"ids": ids})


def _expected(readings: dict[str, dict[int, tuple[bool | None, bool]]]) -> tuple[datetime | None, set[str]]:
    """(time measured at, free GPUs), stated directly."""
    at = {g: {END - timedelta(minutes=m): v for m, v in r.items()} for g, r in readings.items()}
    in_window = [ts for r in at.values() for ts in r if START <= ts < END]
    if not in_window:
        return None, set()
    newest = max(in_window)
    free, measured = set(), None
    for gpu, by_ts in at.items():
        fresh = [ts for ts in by_ts if newest - timedelta(seconds=FRESH_SECONDS) <= ts <= newest]
        if not fresh:
            continue  # silent for too long: unknown, not free
        own = max(fresh)
        measured = own if measured is None else max(measured, own)
        up, held = by_ts[own]
        if up is not False and not held:
            free.add(gpu)
    return measured, free


@settings(max_examples=60, deadline=None)
@given(samples)
@example({"GPU-0": {55: (True, False)}, "GPU-1": {62: (True, False)}, "GPU-2": {66: (True, False)}})
@example({"GPU-0": {300: (None, False), 296: (True, True)}, "GPU-1": {299: (True, False)},
          "GPU-2": {-1: (True, False)}})
@example({"GPU-0": {1: (True, True), 2: (True, False)}, "GPU-1": {1: (False, False)}, "GPU-2": {1: (None, False)},
          "GPU-3": {11: (True, False), 9: (True, True)}})
@example({"GPU-0": {1442: (True, False), 1500: (True, True)}, "GPU-1": {1437: (True, False)},
          "GPU-2": {1450: (True, False)}, "GPU-3": {1438: (False, False), 1441: (True, False)}})
def test_a_gpu_is_free_as_its_newest_fresh_sample_says(readings: dict[str, dict[int, tuple[bool | None, bool]]]) -> None:
    con = _store(readings)
    try:
        _window_states(con, Window(START, END, 300))
        rows = stranded_by_topology(con, PLACES, {"H100": {2}}, {"H100": {2}})
    finally:
        con.close()
    measured, free = _expected(readings)
    nvlink = [r for r in rows if r.level == "nvlink"]
    assert {r.domain for r in nvlink} == {f"nv-{g}" for g in free}
    assert [r.free_gpus for r in rows if r.level == "node"] == ([len(free)] if free else [])
    assert {r.at for r in rows} <= {measured}
