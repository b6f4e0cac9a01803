"""One read of a day part's GPU samples per GPU (``an_gpu_day``): its health sums and what the day measured.

``an_gpu_day`` holds, per GPU with samples in the part's span, the minima, maxima and times of **all**
its samples (``up = false`` ones included) that ``part_health`` stores (the times of a row-remap failure
or of ``up = false`` from a second read of the few GPUs that had one) and whether it was up at its last
sample (``part_gpu_last``, for stranded-by-topology), plus what the early-warning
buckets (``early_warning.py``) learn from it before they read the samples per bucket: whether any GPU
was lost (else every sample is one of an up GPU), which trend counters were sent at all, and whether the
day has SM clock readings (else there is no clock reference to read and no clock sample to count).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb

from analytics.facts import Window

_BUILD = """
CREATE OR REPLACE TEMP TABLE an_gpu_day AS
SELECT gpu_uuid,
       min(ecc_uncorrected_total) AS ecc_min, max(ecc_uncorrected_total) AS ecc_max,
       max(retired_pages_total) AS retired_max,
       bool_or(remapped_rows_failure) AS remap_failed, NULL::TIMESTAMP AS remap_ts,
       bool_or(NOT up) AS lost, NULL::TIMESTAMP AS lost_first, NULL::TIMESTAMP AS lost_last,
       min(thermal_violation_seconds_total) AS thermal_min, max(thermal_violation_seconds_total) AS thermal_max,
       min(nvlink_crc_errors_total) AS crc_min, max(nvlink_crc_errors_total) AS crc_max,
       min(ts) AS first_ts, max(ts) AS last_ts, arg_max(coalesce(up, true), ts) AS up_at_last,
       count(ecc_corrected_total) AS ecc_corrected_n, count(pcie_replay_total) AS pcie_replay_n,
       count(sm_clock_hz) AS sm_clock_n,
       NULL::TIMESTAMP AS remap_onset, NULL::BOOLEAN AS remap_at_first, NULL::BOOLEAN AS remap_at_last,
       NULL::TIMESTAMP AS lost_onset, NULL::BOOLEAN AS lost_at_first, NULL::BOOLEAN AS lost_at_last
FROM f_gpu_samples WHERE ts >= $start AND ts < $end
GROUP BY gpu_uuid
"""

HEALTH_COLUMNS = ("ecc_min", "ecc_max", "retired_max", "remap_failed", "remap_ts", "lost", "lost_first", "lost_last",
                  "thermal_min", "thermal_max", "crc_min", "crc_max", "first_ts", "last_ts")
"""``part_health``'s columns between ``gpu_uuid`` and ``crc_rate``, in order."""

ONSET_COLUMNS = ("remap_onset", "remap_at_first", "remap_at_last", "lost_onset", "lost_at_first", "lost_at_last")
"""``part_health``'s last columns, after ``crc_rate``: where a failure state (row-remap failure, ``up = false``)
was seen to begin inside the span (a failed reading after a reading that was not), and whether the span's first
and last readings were failed, so the window can tell a failure that began on a later day from one that was
already there when its first reading came. A GPU without such a reading in the span has ``remap_failed`` /
``lost`` there (false, or NULL when never read)."""


@dataclass(frozen=True)
class DaySeen:
    """What the day's GPU samples held, over all GPUs (a column never sent reads NULL in every bucket)."""

    lost: bool
    """A GPU reported ``up = false``."""
    ecc_corrected: bool
    pcie_replay: bool
    nvlink_crc: bool
    thermal: bool
    sm_clock: bool
    """An SM clock reading (with or without a power reading)."""


_SIGNAL_TIMES = """
UPDATE an_gpu_day SET remap_ts = t.remap_ts, lost_first = t.lost_first, lost_last = t.lost_last,
       remap_onset = t.remap_onset, remap_at_first = t.remap_at_first, remap_at_last = t.remap_at_last,
       lost_onset = t.lost_onset, lost_at_first = t.lost_at_first, lost_at_last = t.lost_at_last
FROM (
    SELECT gpu_uuid, min(ts) FILTER (WHERE remap) AS remap_ts,
           min(ts) FILTER (WHERE remap AND NOT remap_before) AS remap_onset,
           arg_min(remap, ts) FILTER (WHERE remap IS NOT NULL) AS remap_at_first,
           arg_max(remap, ts) FILTER (WHERE remap IS NOT NULL) AS remap_at_last,
           min(ts) FILTER (WHERE lost) AS lost_first, max(ts) FILTER (WHERE lost) AS lost_last,
           min(ts) FILTER (WHERE lost AND NOT lost_before) AS lost_onset,
           arg_min(lost, ts) FILTER (WHERE lost IS NOT NULL) AS lost_at_first,
           arg_max(lost, ts) FILTER (WHERE lost IS NOT NULL) AS lost_at_last
    FROM (
        SELECT gpu_uuid, ts, remapped_rows_failure AS remap, NOT up AS lost,
               lag(remapped_rows_failure IGNORE NULLS) OVER w AS remap_before,  -- the reading before, if any
               lag(NOT up IGNORE NULLS) OVER w AS lost_before
        FROM f_gpu_samples WHERE ts >= $start AND ts < $end AND list_contains($gpus, gpu_uuid)
        WINDOW w AS (PARTITION BY gpu_uuid ORDER BY ts)
    )
    GROUP BY gpu_uuid
) t
WHERE an_gpu_day.gpu_uuid = t.gpu_uuid
"""
"""The first row-remap failure and the first and last ``up = false`` of the GPUs that had one, with where such a
state began in the span and whether the span's first and last readings had it (rare: the samples of those GPUs
only are read again; every other GPU's times are NULL, as there is none)."""


def build(con: duckdb.DuckDBPyConnection, window: Window) -> None:
    """Make ``an_gpu_day`` for the day part's span ``window`` (the caller drops it with :func:`drop`)."""
    span = {"start": window.start, "end": window.end}
    con.execute(_BUILD, span)
    flagged = [r[0] for r in con.execute(
        "SELECT gpu_uuid FROM an_gpu_day WHERE remap_failed OR lost ORDER BY 1"
    ).fetchall()]
    if flagged:
        con.execute(_SIGNAL_TIMES, {**span, "gpus": flagged})


@contextmanager
def built(con: duckdb.DuckDBPyConnection, window: Window) -> Iterator[None]:
    """``an_gpu_day`` of the span ``window`` for the block (:func:`build`, then :func:`drop`)."""
    build(con, window)
    try:
        yield
    finally:
        drop(con)


def seen(con: duckdb.DuckDBPyConnection) -> DaySeen:
    """What ``an_gpu_day`` says the day measured."""
    row = con.execute(
        "SELECT coalesce(bool_or(lost), false), coalesce(sum(ecc_corrected_n), 0) > 0, "
        "coalesce(sum(pcie_replay_n), 0) > 0, count(crc_max) > 0, count(thermal_max) > 0, "
        "coalesce(sum(sm_clock_n), 0) > 0 FROM an_gpu_day"
    ).fetchone()
    assert row is not None
    return DaySeen(*(bool(v) for v in row))


def crc_moved(con: duckdb.DuckDBPyConnection) -> list[str]:
    """GPUs whose NVLink CRC counter moved in the span."""
    return [r[0] for r in con.execute("SELECT gpu_uuid FROM an_gpu_day WHERE crc_max > crc_min ORDER BY 1").fetchall()]


def drop(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("DROP TABLE IF EXISTS an_gpu_day")
