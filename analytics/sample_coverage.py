"""Health from the monitoring itself: GPUs whose samples stopped or thinned out, as evidence (never "healthy").

A GPU whose exporter stops answering, or whose series vanish, has no readings from some time on: what
was not measured is not fine, so such a GPU is ``warn`` with the time its samples stopped, measured
against the fleet's last sample (the data's end, not the wall clock). A GPU whose samples thinned out
(failing scrapes, dropped series) has far fewer samples than the fleet's median over the last
``thin_lookback_seconds``; judged only where the median is at least ``thin_min_samples``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime, timedelta

import duckdb

from analytics.facts import Window
from analytics.settings import HealthRules

STOPPED = "samples_stopped"
THINNED = "samples_thinned"
SIGNALS = (STOPPED, THINNED)


@dataclass(frozen=True)
class CoverageGap:
    gpu_uuid: str
    signal: str
    value: float
    threshold: float
    reason: str
    since: datetime
    until: datetime


def coverage_gaps(con: duckdb.DuckDBPyConnection, window: Window, rules: HealthRules,
                  last_seen: dict[str, datetime]) -> list[CoverageGap]:
    """The GPUs (of ``last_seen``: each GPU's last physical sample in the window) whose samples stopped or thinned."""
    if not last_seen:
        return []
    fleet_last = max(last_seen.values())
    silent = timedelta(seconds=rules.silent_after_seconds)
    out = []
    for gpu, last in sorted(last_seen.items()):
        if fleet_last - last >= silent:
            minutes = (fleet_last - last).total_seconds() / 60
            out.append(CoverageGap(
                gpu, STOPPED, round(minutes, 1), rules.silent_after_seconds / 60,
                f"no samples since {last:%Y-%m-%d %H:%M} ({minutes:.0f} min before the fleet's last): its exporter "
                "stopped answering or its metrics vanished; unmeasured since, not healthy", last, fleet_last))
    stopped = {g.gpu_uuid for g in out}
    since = max(window.start, fleet_last - timedelta(seconds=rules.thin_lookback_seconds))
    counts = dict(con.execute(
        "SELECT gpu_uuid, count(*) FROM f_gpu_samples WHERE ts >= $since AND ts <= $until GROUP BY gpu_uuid",
        {"since": since, "until": fleet_last}).fetchall())
    judged = [int(counts.get(g, 0)) for g in last_seen if g not in stopped]
    if not judged:
        return out
    median = statistics.median(judged)
    if median < rules.thin_min_samples:
        return out
    floor = rules.thin_share * median
    minutes = (fleet_last - since).total_seconds() / 60
    for gpu in sorted(last_seen):
        n = int(counts.get(gpu, 0))
        if gpu not in stopped and n < floor:
            out.append(CoverageGap(
                gpu, THINNED, n, round(floor, 1),
                f"{n} samples in the last {minutes:.0f} min, under {rules.thin_share:.0%} of the fleet's median "
                f"({median:g}): scrapes failing or series dropped; partly unmeasured, not healthy", since, fleet_last))
    return out
