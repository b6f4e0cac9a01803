"""Tenant quota recommendations per queue, flavor and resource, from allocated plus pending demand.

For each quota entry (a Kueue ClusterQueue flavor/resource, a ResourceQuota resource, a KAI Scheduler or
Volcano queue's resource: :mod:`collector.queue_systems`) the demand in
each time bucket is what was in use plus what was waiting. The recommendation is
``ceil(P95(demand) * (1 + headroom))`` with guard rails: never below current usage plus pending, no
cut while pending demand (from the resource gauge, pending workload counts or pending pods) was seen
in the window, no cut on less than ``min_cut_days`` of evidence or one that all stored history up to
``history_days`` contradicts, and at most ``max_step`` of change per apply (``next_value``). Bounds
follow VPA: lower = P50, upper = P99 + headroom widened by ``1 + 1/confidence``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import duckdb
from pydantic import BaseModel, ConfigDict, Field

from analytics.cut_rule import cut_refusal
from analytics.rightsizing.confidence import Confidence, vpa_confidence
from analytics.rightsizing.strategy import WorkloadRecommendation
from collector.queue_systems import pending_match_sql, system_of
from gpulens.core.mig_catalog import COMPUTE_SLICES, MEMORY_SLICES, model_by_name

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
EPS = 1e-9


def resource_for_profile(profile: str) -> str:
    """Extended resource name of a device shape: ``gpu`` -> ``nvidia.com/gpu``, MIG -> ``nvidia.com/mig-<p>``."""
    return GPU_RESOURCE if profile == "gpu" else f"{MIG_RESOURCE_PREFIX}{profile}"


class QuotaSettings(BaseModel):
    """Policy of the quota recommender."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    percentile: float = Field(default=0.95, gt=0, le=1, description="Percentile of allocated+pending demand.")
    headroom: float = Field(default=0.15, ge=0, le=2, description="Fraction added on top of the percentile.")
    lower_percentile: float = Field(default=0.5, gt=0, le=1, description="Percentile of the lower bound.")
    upper_percentile: float = Field(default=0.99, gt=0, le=1, description="Percentile of the upper bound.")
    max_step: float = Field(default=0.25, gt=0, le=10, description="Largest change per apply, as a fraction of current.")
    min_step_units: int = Field(default=1, ge=1, description="A step may always move at least this many units.")
    bucket_seconds: int = Field(default=300, ge=1, description="Demand is the maximum within buckets of this size.")
    min_buckets: int = Field(default=12, ge=1, description="Fewer buckets with data: no recommendation.")
    low_confidence_days: float = Field(default=2.0, ge=0, description="Confidence (days) below which apply refuses.")
    min_cut_days: float = Field(
        default=14.0, ge=0, description="A cut needs evidence over at least this many days; shorter may only raise."
    )
    history_days: float = Field(
        default=30.0, gt=0, description="A cut must also hold over all stored history up to this many days."
    )


@dataclass(frozen=True)
class QuotaKey:
    """One quota entry: an object (a ClusterQueue, ResourceQuota, KAI or Volcano queue), a flavor ('' where the
    object has none), a resource."""

    object_kind: str
    namespace: str
    name: str
    flavor: str
    resource: str

    @property
    def object_id(self) -> tuple[str, str, str]:
        return (self.object_kind, self.namespace, self.name)

    @property
    def system(self) -> str:
        """The quota system the object belongs to: ``kueue``, ``kai``, ``volcano`` or ``kubernetes``."""
        return system_of(self.object_kind)

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        flavor = f" flavor {self.flavor}" if self.flavor else ""
        return f"{self.object_kind} {where}{self.name}{flavor} {self.resource}"


@dataclass(frozen=True)
class QuotaEvidence:
    """Current quota state and the demand distribution of one quota entry over the window."""

    key: QuotaKey
    tenant: str
    nominal: float | None
    borrowing_limit: float | None
    lending_limit: float | None
    annotations: dict[str, str]
    usage_now: float
    pending_now: float
    pending_max: float
    pending_buckets: int
    buckets: int
    demand_lower: float
    demand_target: float
    demand_upper: float
    demand_max: float
    first_seen: datetime
    last_seen: datetime
    usage_from_allocations: bool = False
    pending_count_only_buckets: int = 0
    """Buckets where only a count of pending workloads is known (Kueue < 0.18: no resource gauge)."""
    pending_pod_buckets: int = 0
    """Buckets whose pending quantity comes from pending pods of the Kubernetes inventory."""

    @property
    def span_seconds(self) -> float:
        return (self.last_seen - self.first_seen).total_seconds()

    def days(self, bucket_seconds: float) -> float:
        """Days the evidence covers: first to last bucket with data, the last one included."""
        return (self.span_seconds + bucket_seconds) / 86_400 if self.buckets else 0.0


@dataclass(frozen=True)
class QuotaRecommendation:
    """A recommended quota for one entry, the step to apply now, and why."""

    evidence: QuotaEvidence
    action: str
    """``increase``, ``decrease``, ``hold`` or ``insufficient_data``."""
    current: int | None
    uncapped_target: int | None
    recommended: int | None
    next_value: int | None
    """What the next apply writes: ``recommended`` limited to ``max_step`` of change."""
    lower_bound: int | None
    upper_bound: int | None
    confidence: Confidence
    reasons: tuple[str, ...]

    @property
    def key(self) -> QuotaKey:
        return self.evidence.key

    @property
    def changes(self) -> bool:
        return self.action in ("increase", "decrease") and self.next_value != self.current


@dataclass(frozen=True)
class MigConversion:
    """A proposal to serve a tenant's whole-GPU workloads from a MIG flavor instead."""

    tenant: str
    gpu_model: str
    profile: str
    whole_gpus: int
    mig_instances: int
    gpus_needed: int
    workloads: tuple[str, ...]
    queue: QuotaKey | None
    reasons: tuple[str, ...] = field(default_factory=tuple)

    @property
    def to_resource(self) -> str:
        return resource_for_profile(self.profile)


_PENDING_P = pending_match_sql("k", "p")
_PENDING_PP = pending_match_sql("k", "pp")
_EVIDENCE_SQL = f"""
WITH snaps AS (
    SELECT object_kind, object_namespace, object_name, flavor,
           regexp_replace(resource, '^requests\\.', '') AS resource,
           tenant, ts, nominal_quota, borrowing_limit, lending_limit, usage, annotations
    FROM f_quota_snapshots WHERE ts BETWEEN $start AND $end
),
keys AS (
    SELECT object_kind, object_namespace, object_name, flavor, resource,
           arg_max(nominal_quota, ts) AS nominal, arg_max(borrowing_limit, ts) AS borrowing,
           arg_max(lending_limit, ts) AS lending,
           coalesce(arg_max(tenant, ts), any_value(object_namespace)) AS tenant,
           arg_max(annotations, ts) AS annotations, count(usage) AS usage_samples
    FROM snaps GROUP BY object_kind, object_namespace, object_name, flavor, resource
),
held AS (
    SELECT a.ts, a.tenant, a.namespace,
           CASE WHEN d.profile = 'gpu' THEN 'nvidia.com/gpu' ELSE 'nvidia.com/mig-' || d.profile END AS resource,
           count(*) AS units
    FROM f_allocations a JOIN devices d ON d.device_id = a.device_id
    WHERE a.ts BETWEEN $start AND $end
      AND (a.tenant IN (SELECT tenant FROM keys WHERE usage_samples = 0 AND object_kind = 'ClusterQueue')
           OR a.namespace IN (SELECT object_namespace FROM keys WHERE usage_samples = 0
                              AND object_kind <> 'ClusterQueue'))
    GROUP BY ALL
),
used AS (
    SELECT object_kind, object_namespace, object_name, flavor, resource, time_bucket(to_seconds($bucket), ts) AS b, max(usage) AS used
    FROM snaps WHERE usage IS NOT NULL GROUP BY ALL
    UNION ALL
    SELECT k.object_kind, k.object_namespace, k.object_name, k.flavor, k.resource,
           time_bucket(to_seconds($bucket), h.ts) AS b, max(h.units) AS used
    FROM keys k JOIN held h ON h.resource = k.resource AND CASE WHEN k.object_kind = 'ClusterQueue'
        THEN h.tenant = k.tenant ELSE h.namespace = k.object_namespace END
    WHERE k.usage_samples = 0
    GROUP BY ALL
),
local_queues AS (
    SELECT DISTINCT object_namespace AS namespace, object_name AS queue,
           json_extract_string(annotations, '$.clusterQueue') AS cluster_queue
    FROM f_quota_snapshots WHERE object_kind = 'LocalQueue'
      AND json_extract_string(annotations, '$.clusterQueue') IS NOT NULL  -- Kueue's metrics do not name it
),
pending_pods AS (
    -- pods of the Kubernetes inventory that wait (phase Pending), by queue, namespace and resource
    SELECT p.ts, p.namespace, coalesce(lq.cluster_queue, '') AS cluster_queue,
           regexp_replace(r.key, '^requests\\.', '') AS resource,
           sum(TRY_CAST(r.value AS DOUBLE)) AS qty, count(*) AS pods
    FROM f_pod_snapshots p CROSS JOIN json_each(p.gpu_requests) r
    LEFT JOIN local_queues lq ON lq.namespace = p.namespace AND lq.queue = p.queue
    WHERE p.phase = 'Pending' AND p.ts BETWEEN $start AND $end
    GROUP BY ALL
),
pending_rows AS (
    -- pending_demand: the resource gauge (quantity) or, from Kueue < 0.18, workload counts only
    -- (resource '' and quantity NULL: they count for every resource of the queue)
    SELECT k.object_kind, k.object_namespace, k.object_name, k.flavor, k.resource, p.ts,
           p.quantity AS gauge_qty, CAST(NULL AS DOUBLE) AS pod_qty,
           CASE WHEN p.quantity IS NULL THEN p.workloads ELSE 0 END AS counted_only
    FROM keys k JOIN f_pending_demand p
        ON (regexp_replace(p.resource, '^requests\\.', '') = k.resource OR p.resource = '')
        AND (k.object_kind <> 'ClusterQueue' OR p.flavor = '' OR p.flavor = k.flavor) AND {_PENDING_P}
    WHERE p.ts BETWEEN $start AND $end
    UNION ALL
    SELECT k.object_kind, k.object_namespace, k.object_name, k.flavor, k.resource, pp.ts,
           NULL, pp.qty, 0
    FROM keys k JOIN pending_pods pp ON pp.resource = k.resource AND {_PENDING_PP}
),
pending_ts AS (
    SELECT object_kind, object_namespace, object_name, flavor, resource, ts,
           sum(gauge_qty) AS gauge, sum(pod_qty) AS pods, sum(counted_only) AS counted_only
    FROM pending_rows GROUP BY ALL
),
pending AS (
    -- quantity from the resource gauge, else from pending pods; waiting from every source
    SELECT object_kind, object_namespace, object_name, flavor, resource, time_bucket(to_seconds($bucket), ts) AS b,
           max(coalesce(gauge, pods)) AS pending,
           bool_or(coalesce(gauge, 0) > 0 OR coalesce(pods, 0) > 0 OR counted_only > 0) AS waiting,
           bool_or(counted_only > 0 AND coalesce(gauge, 0) = 0) AS counted_only,
           bool_or(gauge IS NULL AND coalesce(pods, 0) > 0) AS from_pods
    FROM pending_ts GROUP BY ALL
),
demand AS (
    SELECT object_kind, object_namespace, object_name, flavor, resource, b, coalesce(used, 0) AS used,
           coalesce(pending, 0) AS pending, coalesce(waiting, false) AS waiting,
           coalesce(counted_only, false) AS counted_only, coalesce(from_pods, false) AS from_pods,
           coalesce(used, 0) + coalesce(pending, 0) AS demand
    FROM used FULL OUTER JOIN pending USING (object_kind, object_namespace, object_name, flavor, resource, b)
)
SELECT k.object_kind, k.object_namespace, k.object_name, k.flavor, k.resource, k.tenant,
       k.nominal, k.borrowing, k.lending, k.annotations, k.usage_samples = 0 AS from_allocations,
       arg_max(d.used, d.b), arg_max(d.pending, d.b), max(d.pending),
       count(d.b) FILTER (WHERE d.waiting), count(d.b),
       quantile_cont(d.demand, $lower), quantile_cont(d.demand, $target), quantile_cont(d.demand, $upper),
       max(d.demand), min(d.b), max(d.b),
       count(d.b) FILTER (WHERE d.counted_only), count(d.b) FILTER (WHERE d.from_pods)
FROM keys k LEFT JOIN demand d USING (object_kind, object_namespace, object_name, flavor, resource)
GROUP BY ALL
ORDER BY k.object_kind, k.object_namespace, k.object_name, k.flavor, k.resource
"""  # noqa: S608 - built from constants of our own


def load_quota_evidence(
    con: duckdb.DuckDBPyConnection, window_start: datetime, window_end: datetime, settings: QuotaSettings
) -> list[QuotaEvidence]:
    """Current state and demand statistics of every quota entry seen in the window.

    Reads the ``f_*`` fact views (:func:`~analytics.facts.bind_facts` first) and the ``devices`` dimension.
    """
    rows = con.execute(
        _EVIDENCE_SQL,
        {
            "start": window_start, "end": window_end, "bucket": settings.bucket_seconds,
            "lower": settings.lower_percentile, "target": settings.percentile, "upper": settings.upper_percentile,
        },
    ).fetchall()
    out = []
    for (kind, ns, name, flavor, resource, tenant, nominal, borrowing, lending, notes, from_alloc,
         used_now, pending_now, pending_max, pending_buckets, buckets, lo, target, hi, dmax, first, last,
         counted_only, from_pods) in rows:
        out.append(
            QuotaEvidence(
                key=QuotaKey(kind, ns, name, flavor, resource), tenant=tenant or ns,
                nominal=nominal, borrowing_limit=borrowing, lending_limit=lending,
                annotations=_annotations(notes), usage_now=float(used_now or 0),
                pending_now=float(pending_now or 0), pending_max=float(pending_max or 0),
                pending_buckets=int(pending_buckets), buckets=int(buckets),
                demand_lower=float(lo or 0), demand_target=float(target or 0), demand_upper=float(hi or 0),
                demand_max=float(dmax or 0), first_seen=first or window_start, last_seen=last or window_start,
                usage_from_allocations=bool(from_alloc), pending_count_only_buckets=int(counted_only),
                pending_pod_buckets=int(from_pods),
            )
        )
    return out


def _annotations(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    data = json.loads(raw) if isinstance(raw, str) else raw
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _ceil(x: float) -> int:
    return max(0, math.ceil(x - EPS))


def recommend_quota(
    ev: QuotaEvidence, s: QuotaSettings, history: QuotaEvidence | None = None
) -> QuotaRecommendation:
    """Apply the quota policy to one entry's evidence.

    ``history`` is the same entry over all stored history up to ``s.history_days`` (``None``: the
    window is all the history there is); a cut must hold over it too.
    """
    conf = vpa_confidence(ev.span_seconds + s.bucket_seconds, ev.buckets, s.bucket_seconds,
                          low_below_days=s.low_confidence_days)
    current = None if ev.nominal is None else _ceil(ev.nominal)
    reasons = [
        f"demand (in use + pending) over {conf.history_days:.1f} days in {ev.buckets} buckets"
        f"{_span(ev)}: P{s.lower_percentile * 100:g} {ev.demand_lower:g}, P{s.percentile * 100:g} "
        f"{ev.demand_target:g}, max {ev.demand_max:g}; confidence {conf.value:.1f} ({conf.label})"
    ]
    if ev.usage_from_allocations:
        reasons.append("quota usage not recorded: in-use units counted from device allocations")
    if ev.buckets < s.min_buckets:
        reasons.append(f"not enough data: {ev.buckets} buckets, needs {s.min_buckets}")
        return QuotaRecommendation(ev, "insufficient_data", current, None, None, None, None, None, conf,
                                   tuple(reasons))
    uncapped = _ceil(ev.demand_target * (1 + s.headroom))
    recommended = uncapped
    reasons.append(f"target = P{s.percentile * 100:g} x {1 + s.headroom:g} rounded up = {uncapped}")
    if current is not None and recommended > current and ev.pending_buckets == 0 and ev.demand_max <= current:
        recommended = current
        reasons.append("demand never exceeded the quota and nothing was pending: no increase on headroom alone")
    reasons += _pending_reasons(ev)
    floor = _ceil(ev.usage_now + ev.pending_now)
    if recommended < floor:
        recommended = floor
        reasons.append(f"raised to current usage {ev.usage_now:g} + pending {ev.pending_now:g} = {floor}")
    if current is not None and recommended < current:
        recommended = _guard_cut(ev, history, s, current, recommended, floor, reasons)
    if recommended < ev.demand_max:
        reasons.append(f"flag: target {recommended} is below the observed peak demand {ev.demand_max:g}")
    if recommended == 0:
        reasons.append("flag: target 0 admits nothing of this resource")
    lower = min(_ceil(ev.demand_lower), recommended)
    widen = 1 + 1 / max(conf.value, 1 / 24)
    upper = max(_ceil(ev.demand_upper * (1 + s.headroom) * widen), recommended)
    next_value = recommended
    if current is not None:
        allowed = max(s.min_step_units, math.floor(current * s.max_step + EPS))
        next_value = min(max(recommended, current - allowed), current + allowed)
        if next_value != recommended:
            reasons.append(f"step limited to {s.max_step:.0%} ({allowed} units) per apply: next {next_value}")
    if current is None or next_value > current:
        action = "increase"
    elif next_value < current:
        action = "decrease"
    else:
        action = "hold"
    return QuotaRecommendation(ev, action, current, uncapped, recommended, next_value, lower, upper, conf,
                               tuple(reasons))


def _span(ev: QuotaEvidence) -> str:
    return f" ({ev.first_seen:%Y-%m-%d %H:%M} .. {ev.last_seen:%Y-%m-%d %H:%M} UTC)" if ev.buckets else ""


def _pending_reasons(ev: QuotaEvidence) -> list[str]:
    out = []
    if ev.pending_buckets:
        out.append(f"pending demand in {ev.pending_buckets} of {ev.buckets} buckets (up to {ev.pending_max:g})")
    if ev.pending_count_only_buckets:
        out.append(
            f"pending workloads counted without their resources in {ev.pending_count_only_buckets} buckets "
            "(kueue_pending_workloads; Kueue before 0.18 exports no kueue_cluster_queue_resource_pending): "
            "the pending quantity there is not measured"
        )
    if ev.pending_pod_buckets:
        out.append(f"pending quantity from pending pods of the Kubernetes inventory in {ev.pending_pod_buckets} buckets")
    return out


def _guard_cut(
    ev: QuotaEvidence, history: QuotaEvidence | None, s: QuotaSettings, current: int, recommended: int,
    floor: int, reasons: list[str],
) -> int:
    """The value a cut may go to: ``current`` unless the window and the stored history both support it."""
    if ev.pending_buckets > 0:
        reasons.append("pending demand in the window: no cut")
        return current
    days = ev.days(s.bucket_seconds)
    refusal = cut_refusal(days, s.min_cut_days, s.bucket_seconds)
    if refusal is not None:
        reasons.append(refusal)
        return current
    if history is None or history.buckets <= ev.buckets:
        reasons.append(f"cut decided by the {days:.1f} days of evidence (all the stored history up to "
                       f"{s.history_days:g} days)")
        return recommended
    held = history.days(s.bucket_seconds)
    if history.pending_buckets > 0:
        reasons.append(
            f"no cut: the {held:.1f} days of stored history had pending demand in {history.pending_buckets} "
            f"buckets (up to {history.pending_max:g})"
        )
        return current
    longer = max(_ceil(history.demand_target * (1 + s.headroom)), floor)
    if longer >= current:
        reasons.append(
            f"no cut: over the {held:.1f} days of stored history P{s.percentile * 100:g} demand is "
            f"{history.demand_target:g} (max {history.demand_max:g}), target {longer} >= current {current}"
        )
        return current
    decided = max(recommended, longer)
    reasons.append(
        f"cut holds over the {held:.1f} days of stored history (target {longer}); decided by the "
        f"{'stored history' if longer > recommended else f'{days:.1f}-day window'}: {decided}"
    )
    return decided


def propose_mig_conversions(
    workloads: Iterable[WorkloadRecommendation], quotas: Iterable[QuotaRecommendation]
) -> list[MigConversion]:
    """Group confident whole-GPU -> MIG workload recommendations per tenant, model and profile."""
    queues: dict[str, QuotaKey] = {}
    for q in quotas:
        if q.key.resource == GPU_RESOURCE:
            queues.setdefault(q.evidence.tenant, q.key)
    groups: dict[tuple[str, str, str], list[WorkloadRecommendation]] = defaultdict(list)
    for w in workloads:
        if w.converts_to_mig and w.recommended_profile is not None:
            groups[(w.usage.tenant, w.usage.gpu_model, w.recommended_profile)].append(w)
    out = []
    for (tenant, model_name, profile_name), recs in sorted(groups.items()):
        profile = model_by_name(model_name).profile(profile_name)
        instances = sum(r.usage.max_replicas for r in recs)
        whole = sum(r.usage.max_replicas * r.usage.devices_per_pod for r in recs)
        gpus_needed = max(
            math.ceil(instances * profile.compute_slices / COMPUTE_SLICES),
            math.ceil(instances * profile.memory_slices / MEMORY_SLICES),
            math.ceil(instances / profile.max_instances),
        )
        names = tuple(r.usage.key for r in recs)
        out.append(
            MigConversion(
                tenant=tenant, gpu_model=model_name, profile=profile_name, whole_gpus=whole,
                mig_instances=instances, gpus_needed=gpus_needed, workloads=names, queue=queues.get(tenant),
                reasons=(
                    f"{len(recs)} workload(s) fit {profile_name} on {model_name} in memory and compute: "
                    f"{whole} whole GPU(s) -> {instances} x {profile_name} on {gpus_needed} GPU(s)",
                ),
            )
        )
    return out
