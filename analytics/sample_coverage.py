"""Health from the monitoring itself: GPUs whose samples stopped or thinned out, as evidence (never "healthy").

A GPU whose exporter stops answering, or whose series vanish, has no readings from some time on: what
was not measured is not fine, so such a GPU is ``warn`` with the time its samples stopped, measured
against the fleet's last sample (the data's end, not the wall clock). A GPU whose samples thinned out
(failing scrapes, dropped series) has far fewer samples than the fleet's median over the last
``thin_lookback_seconds``; judged only where the median is at least ``thin_min_samples``.
"""

from __future__ import annotations

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


_STOPPED = """
SELECT gpu_uuid, last_ts FROM an_health_window WHERE last_ts IS NOT NULL AND last_ts <= $cutoff ORDER BY gpu_uuid
"""

_THINNED = """
WITH judged AS MATERIALIZED (  -- every GPU read in the window whose samples did not stop: its samples since $since
    SELECT w.gpu_uuid, coalesce(c.n, 0) AS n
    FROM an_health_window w LEFT JOIN (
        SELECT gpu_uuid, count(*) AS n FROM f_gpu_samples WHERE ts >= $since AND ts <= $until GROUP BY gpu_uuid
    ) c USING (gpu_uuid)
    WHERE w.last_ts IS NOT NULL AND w.last_ts > $cutoff
),
fleet AS (SELECT median(n) AS median FROM judged)
SELECT j.gpu_uuid, j.n, f.median FROM judged j, fleet f
WHERE f.median >= $min_samples AND j.n < $share * f.median
ORDER BY j.gpu_uuid
"""
"""The GPUs with fewer samples since ``$since`` than ``$share`` of the median of all judged GPUs (a median of an
even count is the mean of the middle two), where that median is at least ``$min_samples``."""


def coverage_gaps(con: duckdb.DuckDBPyConnection, window: Window, rules: HealthRules) -> list[CoverageGap]:
    """The GPUs of ``an_health_window`` (each GPU's last physical sample in the window, ``last_ts``) whose samples
    stopped or thinned; only those come out of DuckDB (the fleet's million quiet GPUs stay there)."""
    row = con.execute("SELECT max(last_ts) FROM an_health_window").fetchone()
    if row is None or row[0] is None:
        return []
    fleet_last: datetime = row[0]
    cutoff = fleet_last - timedelta(seconds=rules.silent_after_seconds)
    out = []
    for gpu, last in con.execute(_STOPPED, {"cutoff": cutoff}).fetchall():
        minutes = (fleet_last - last).total_seconds() / 60
        out.append(CoverageGap(
            gpu, STOPPED, round(minutes, 1), rules.silent_after_seconds / 60,
            f"no samples since {last:%Y-%m-%d %H:%M} ({minutes:.0f} min before the fleet's last): its exporter "
            "stopped answering or its metrics vanished; unmeasured since, not healthy", last, fleet_last))
    since = max(window.start, fleet_last - timedelta(seconds=rules.thin_lookback_seconds))
    minutes = (fleet_last - since).total_seconds() / 60
    for gpu, n, median in con.execute(_THINNED, {
        "since": since, "until": fleet_last, "cutoff": cutoff, "min_samples": rules.thin_min_samples,
        "share": rules.thin_share,
    }).fetchall():
        floor = rules.thin_share * median
        out.append(CoverageGap(
            gpu, THINNED, int(n), round(floor, 1),
            f"{n} samples in the last {minutes:.0f} min, under {rules.thin_share:.0%} of the fleet's median "
            f"({median:g}): scrapes failing or series dropped; partly unmeasured, not healthy", since,
            fleet_last))
    return out

