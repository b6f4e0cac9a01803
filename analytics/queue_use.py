"""Quota use per queue over a window: nominal quota, mean and peak usage, and how often work waited.

Read from ``quota_snapshots`` (ClusterQueue, ResourceQuota, KAI and Volcano queue entries) and ``pending_demand``; it
needs no device samples, so a store that holds only Kueue metrics can still be analysed. Usage that
was never recorded stays ``None`` (not measured), never 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import duckdb

from analytics.facts import Window
from collector.queue_systems import QUOTA_KINDS, pending_match_sql


@dataclass(frozen=True)
class QueueUse:
    """One quota entry (object, flavor, resource) over the window."""

    object_kind: str
    name: str
    flavor: str
    resource: str
    nominal: float | None
    usage_mean: float | None
    usage_peak: float | None
    buckets: int
    """Buckets with a quota snapshot."""
    pending_buckets: int
    """Buckets in which work of this queue waited (any pending source)."""
    pending_peak: float | None
    """Largest pending quantity; ``None`` when only counts of waiting workloads are known."""

    def as_json(self) -> dict[str, object]:
        return asdict(self)


_PENDING = pending_match_sql("p", "w")
_KINDS = ", ".join(f"'{k}'" for k in QUOTA_KINDS)
_QUEUE_USE_SQL = f"""
WITH snaps AS (
    SELECT object_kind, CASE WHEN object_namespace = '' THEN object_name ELSE object_namespace || '/' || object_name END
               AS name, object_name, object_namespace, flavor, regexp_replace(resource, '^requests\\.', '') AS resource,
           time_bucket(to_seconds($bs), ts, $start::TIMESTAMP) AS b, nominal_quota, usage, ts
    FROM f_quota_snapshots
    WHERE ts >= $start AND ts < $end AND object_kind IN ({_KINDS})
),
per_bucket AS (
    SELECT object_kind, name, object_name, object_namespace, flavor, resource, b, max(usage) AS usage
    FROM snaps GROUP BY ALL
),
waiting AS (
    SELECT time_bucket(to_seconds($bs), ts, $start::TIMESTAMP) AS b, cluster_queue, namespace, flavor,
           regexp_replace(resource, '^requests\\.', '') AS resource, max(quantity) AS quantity
    FROM f_pending_demand
    WHERE ts >= $start AND ts < $end AND (coalesce(quantity, 0) > 0 OR workloads > 0)
    GROUP BY ALL
),
joined AS (
    SELECT p.*, w.quantity, w.b IS NOT NULL AS waited
    FROM per_bucket p LEFT JOIN waiting w ON w.b = p.b AND (w.resource = p.resource OR w.resource = '')
        AND (w.flavor = '' OR w.flavor = p.flavor)
        AND {_PENDING}
)
SELECT j.object_kind, j.name, j.flavor, j.resource,
       (SELECT arg_max(nominal_quota, ts) FROM snaps s WHERE s.object_kind = j.object_kind AND s.name = j.name
            AND s.flavor = j.flavor AND s.resource = j.resource) AS nominal,
       avg(j.usage), max(j.usage), count(DISTINCT j.b), count(DISTINCT j.b) FILTER (WHERE j.waited), max(j.quantity)
FROM joined j
GROUP BY j.object_kind, j.name, j.flavor, j.resource
ORDER BY j.object_kind, j.name, j.flavor, j.resource
"""  # noqa: S608 - built from constants of our own


def queue_use(con: duckdb.DuckDBPyConnection, window: Window) -> list[QueueUse]:
    """Every ClusterQueue, ResourceQuota, KAI and Volcano queue entry with a snapshot in the window."""
    rows = con.execute(
        _QUEUE_USE_SQL, {"start": window.start, "end": window.end, "bs": window.bucket_seconds}
    ).fetchall()
    return [
        QueueUse(kind, name, flavor, resource, _num(nominal), _num(mean), _num(peak), int(n), int(waited),
                 _num(pending))
        for kind, name, flavor, resource, nominal, mean, peak, n, waited, pending in rows
    ]


def has_queue_data(con: duckdb.DuckDBPyConnection, window: Window) -> bool:
    """Whether the window holds any quota snapshot or pending demand."""
    row = con.execute(
        """
        SELECT EXISTS (SELECT 1 FROM f_quota_snapshots WHERE ts >= $start AND ts < $end)
            OR EXISTS (SELECT 1 FROM f_pending_demand WHERE ts >= $start AND ts < $end)
        """,
        {"start": window.start, "end": window.end},
    ).fetchone()
    return bool(row and row[0])


def _num(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]
