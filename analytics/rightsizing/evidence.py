"""What each workload held and used over a window, read from the store in one query.

A workload is the pod owner the collector recorded (Deployment, StatefulSet, Job, JobSet, RayCluster,
...) or the pod itself when it has none. Statistics are over pod-instants (one pod at one sample time):
compute in GPU-equivalents (the device's activity ratio times its GE, summed over the pod's devices)
and memory in bytes (summed over the pod's devices). Devices shared by several holders (time-slicing,
MPS) are left out: their readings cannot be attributed to one workload. A workload with DCGM profiling
readings (``DCGM_FI_PROF_*``) is sized on those only, never on ``DCGM_FI_DEV_GPU_UTIL`` (a duty cycle that
overstates compute need); ``activity_signals`` names the metrics used. Facts are read through the
``f_*`` views (:func:`~analytics.facts.bind_facts` first), so Parquet history works as the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

BARE_POD_KIND = "Pod"


@dataclass(frozen=True)
class WorkloadUsage:
    """Usage statistics of one workload over the evidence window."""

    namespace: str
    kind: str
    name: str
    tenant: str
    gpu_model: str
    current_profile: str
    """``gpu`` for whole GPUs, a MIG profile such as ``1g.18gb``, or ``mixed``."""
    devices_per_pod: int
    max_replicas: int
    samples: int
    """Distinct sample times with readings."""
    compute_samples: int
    """Pod-instants with a compute activity reading on every held device."""
    compute_p95_ge: float | None
    memory_p99_bytes: float
    memory_peak_bytes: int
    device_memory_peak_bytes: int
    """Largest memory held on any single device (what one MIG instance would have to hold)."""
    first_seen: datetime
    last_seen: datetime
    activity_signals: tuple[str, ...] = ()
    """Metrics the compute figures come from (DCGM profiling fields are preferred to GPU_UTIL)."""

    @property
    def span_seconds(self) -> float:
        return (self.last_seen - self.first_seen).total_seconds()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


_USAGE_SQL = """
WITH held_all AS (
    SELECT a.ts, a.namespace, a.pod, a.device_id,
           coalesce(a.workload_kind, ?) AS kind,
           coalesce(a.workload_name, a.pod) AS name,
           a.tenant, d.gpu_model, d.profile, d.gpu_equivalents AS ge,
           s.activity_ratio, s.memory_used_bytes, s.activity_signal,
           bool_or(starts_with(s.activity_signal, 'DCGM_FI_PROF_')) OVER (
               PARTITION BY a.namespace, coalesce(a.workload_kind, ?), coalesce(a.workload_name, a.pod)
           ) AS has_profiling
    FROM f_allocations a
    JOIN devices d ON d.device_id = a.device_id
    JOIN f_device_samples s ON s.device_id = a.device_id AND s.ts = a.ts
    WHERE a.ts BETWEEN ? AND ?
      AND coalesce(a.sharing_mode, d.sharing_mode, 'exclusive') NOT IN ('time-slicing', 'mps')
),
held AS (
    -- a workload with DCGM profiling readings is sized on them only (GPU_UTIL is a duty cycle)
    SELECT * REPLACE (
               CASE WHEN has_profiling AND NOT coalesce(starts_with(activity_signal, 'DCGM_FI_PROF_'), false)
                    THEN NULL ELSE activity_ratio END AS activity_ratio)
    FROM held_all
),
pods AS (
    SELECT namespace, pod, any_value(kind) AS kind, any_value(name) AS name, any_value(tenant) AS tenant,
           any_value(gpu_model) AS gpu_model,
           CASE WHEN min(profile) = max(profile) THEN min(profile) ELSE 'mixed' END AS profile,
           min(device_id) <> max(device_id) AS several_devices
    FROM held GROUP BY namespace, pod
),
instants AS (
    -- a pod that only ever held one device: its rows already are pod-instants (no regrouping)
    SELECT p.kind, p.name, h.namespace, h.pod, h.ts, 1 AS devices, h.activity_ratio IS NULL AS activity_missing,
           h.activity_ratio * h.ge AS compute_ge, h.memory_used_bytes AS memory_bytes,
           h.memory_used_bytes AS device_memory_bytes, h.activity_signal AS signal
    FROM held h JOIN pods p USING (namespace, pod)
    WHERE NOT p.several_devices AND h.memory_used_bytes IS NOT NULL
    UNION ALL
    SELECT any_value(p.kind), any_value(p.name), h.namespace, h.pod, h.ts, count(*),
           bool_or(h.activity_ratio IS NULL), sum(h.activity_ratio * h.ge), sum(h.memory_used_bytes),
           max(h.memory_used_bytes), min(h.activity_signal)
    FROM held h JOIN pods p USING (namespace, pod)
    WHERE p.several_devices
    GROUP BY h.namespace, h.pod, h.ts
    HAVING sum(h.memory_used_bytes) IS NOT NULL
),
per_time AS (
    SELECT namespace, kind, name, count(*) AS samples, max(pods) AS replicas
    FROM (SELECT namespace, kind, name, ts, count(*) AS pods FROM instants GROUP BY namespace, kind, name, ts)
    GROUP BY namespace, kind, name
),
owners AS (
    SELECT namespace, kind, name, max(tenant) AS tenant, max(gpu_model) AS gpu_model,
           CASE WHEN min(profile) = max(profile) THEN min(profile) ELSE 'mixed' END AS profile
    FROM pods GROUP BY namespace, kind, name
)
SELECT namespace, kind, name,
       any_value(t.samples), any_value(t.replicas), any_value(o.tenant), any_value(o.gpu_model),
       any_value(o.profile),
       max(devices) AS devices_per_pod,
       count(*) FILTER (WHERE NOT activity_missing) AS compute_samples,
       quantile_cont(CASE WHEN NOT activity_missing THEN compute_ge END, ?) AS compute_p,
       quantile_cont(memory_bytes, ?) AS memory_p,
       max(memory_bytes) AS memory_peak,
       max(device_memory_bytes) AS device_memory_peak,
       min(ts) AS first_seen,
       max(ts) AS last_seen,
       list(DISTINCT coalesce(signal, 'activity_ratio (signal not recorded)') ORDER BY
            coalesce(signal, 'activity_ratio (signal not recorded)')) FILTER (WHERE NOT activity_missing) AS signals
FROM instants JOIN per_time t USING (namespace, kind, name) JOIN owners o USING (namespace, kind, name)
GROUP BY namespace, kind, name
ORDER BY namespace, kind, name
"""


def load_workload_usage(
    con: duckdb.DuckDBPyConnection,
    window_start: datetime,
    window_end: datetime,
    *,
    compute_percentile: float = 0.95,
    memory_percentile: float = 0.99,
) -> list[WorkloadUsage]:
    """Per-workload compute and memory statistics over ``[window_start, window_end]``."""
    rows = con.execute(
        _USAGE_SQL,
        [BARE_POD_KIND, BARE_POD_KIND, window_start, window_end, compute_percentile, memory_percentile],
    ).fetchall()
    out = []
    for (ns, kind, name, samples, replicas, tenant, model, profile, per_pod, c_samples, c_p, m_p, m_peak,
         d_peak, first, last, signals) in rows:
        out.append(
            WorkloadUsage(
                namespace=ns, kind=kind, name=name, tenant=tenant or ns, gpu_model=model or "",
                current_profile=profile, devices_per_pod=int(per_pod),
                max_replicas=int(replicas), samples=int(samples),
                compute_samples=int(c_samples), compute_p95_ge=None if c_p is None else float(c_p),
                memory_p99_bytes=float(m_p), memory_peak_bytes=int(m_peak),
                device_memory_peak_bytes=int(d_peak), first_seen=first, last_seen=last,
                activity_signals=tuple(signals or ()),
            )
        )
    return out


def sample_step_seconds(con: duckdb.DuckDBPyConnection, window_start: datetime, window_end: datetime) -> float:
    """The store's native sampling step: the median gap between distinct device sample times."""
    row = con.execute(
        """
        SELECT median(gap) FROM (
            SELECT epoch(ts) - epoch(lag(ts) OVER (ORDER BY ts)) AS gap
            FROM (SELECT DISTINCT ts FROM f_device_samples WHERE ts BETWEEN ? AND ?)
        ) WHERE gap > 0
        """,
        [window_start, window_end],
    ).fetchone()
    return float(row[0]) if row and row[0] else 60.0
