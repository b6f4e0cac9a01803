"""The inputs of a MIG layout plan, read from the store: each GPU's state and each workload's instance demand.

A GPU's state is taken at the end of the evidence window: its MIG layout (the GPU-instance profiles of
its MIG devices seen then), which of its devices are held and by which workloads. The demand is one
entry per workload whose recommendation moves it to another MIG profile (from a whole GPU, or from a
larger or smaller MIG instance) with at least medium confidence.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import duckdb

from analytics.plan.flavor_nodes import table_exists
from analytics.plan.inputs import unhealthy_devices
from analytics.rightsizing.strategy import WorkloadRecommendation
from gpulens.core.device_model import WHOLE_GPU_PROFILE
from gpulens.core.mig_catalog import model_by_name


@dataclass(frozen=True)
class GpuState:
    """One physical GPU as the plan sees it."""

    gpu_uuid: str
    node: str
    index: int | None
    """The GPU's index on its node (what mig-parted's ``devices`` list names); None when not collected."""
    model: str
    layout: tuple[str, ...]
    """GPU-instance profiles of its MIG devices, sorted; empty when the GPU is not in MIG mode."""
    free_instances: tuple[tuple[str, str], ...] = ()
    """``(device id, profile)`` of MIG instances nobody holds."""
    holders: frozenset[str] = frozenset()
    """Workload keys (``namespace/kind/name``) holding any of its devices."""
    health: str | None = None
    """``drain``, ``warn`` or ``watch`` where the newest health run lists the GPU (or its node); None: healthy."""

    @property
    def mig_enabled(self) -> bool:
        return bool(self.layout)


@dataclass(frozen=True)
class InstanceDemand:
    """MIG instances one workload needs after its conversion, and the whole GPUs it gives back."""

    workload: str
    namespace: str
    kind: str
    name: str
    tenant: str
    model: str
    profile: str
    count: int
    current_profile: str
    """``gpu`` or the MIG profile the workload holds today."""
    current_ge: float
    """GPU-equivalents the workload holds today at its largest (all replicas)."""
    containers: tuple[str, ...] = ()
    """Containers that held the GPUs (the ones whose resources change)."""
    current_per_pod: int = 1
    """Devices of ``current_profile`` each pod holds today (what a rollback asks for again)."""
    pending: str | None = None
    """Why the new profile may wait: its queue already has pending work for it in the window (None: none seen)."""


_GPUS_SQL = """
WITH last AS (SELECT max(ts) AS ts FROM allocations WHERE ts BETWEEN $start AND $end),
devs AS (
    SELECT d.device_id, d.gpu_uuid, d.node, d.gpu_model, d.kind, d.profile, g.gpu_index
    FROM devices d LEFT JOIN gpus g USING (gpu_uuid)
    WHERE d.last_seen IS NULL OR d.last_seen >= $start
),
held AS (
    SELECT a.device_id,
           string_agg(DISTINCT a.namespace || '/' || coalesce(a.workload_kind, 'Pod') || '/'
                      || coalesce(a.workload_name, a.pod), '\n') AS holders
    FROM allocations a, last WHERE a.ts = last.ts GROUP BY a.device_id
)
SELECT devs.gpu_uuid, any_value(devs.node), any_value(devs.gpu_index), any_value(devs.gpu_model),
       list(devs.profile ORDER BY devs.profile) FILTER (WHERE devs.kind = 'mig') AS layout,
       list([devs.device_id, devs.profile] ORDER BY devs.device_id)
           FILTER (WHERE devs.kind = 'mig' AND held.holders IS NULL) AS free,
       string_agg(held.holders, '\n') AS holders
FROM devs LEFT JOIN held USING (device_id)
GROUP BY devs.gpu_uuid ORDER BY any_value(devs.node), any_value(devs.gpu_index), devs.gpu_uuid
"""

_CONTAINERS_SQL = """
SELECT a.namespace || '/' || coalesce(a.workload_kind, 'Pod') || '/' || coalesce(a.workload_name, a.pod) AS workload,
       list(DISTINCT a.container ORDER BY a.container) AS containers
FROM allocations a WHERE a.ts BETWEEN $start AND $end GROUP BY workload
"""


def load_gpu_states(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime) -> tuple[GpuState, ...]:
    """Every GPU seen in the window with its layout and holders at the window's last allocation time, and
    its place on the newest health run's drain or warn list (as plan capacity reads it)."""
    rows = con.execute(_GPUS_SQL, {"start": start, "end": end}).fetchall()
    unhealthy = unhealthy_devices(con)
    out = []
    for uuid, node, index, model, layout, free, holders in rows:
        out.append(GpuState(
            gpu_uuid=uuid, node=node, index=None if index is None else int(index), model=model or "",
            layout=tuple(layout or ()), free_instances=tuple((d, p) for d, p in (free or ())),
            holders=frozenset(h for h in (holders or "").split("\n") if h),
            health=unhealthy.gpus.get(uuid) or unhealthy.nodes.get(node),
        ))
    return tuple(out)


def load_containers(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime) -> dict[str, tuple[str, ...]]:
    """Containers that held devices, per workload key."""
    rows = con.execute(_CONTAINERS_SQL, {"start": start, "end": end}).fetchall()
    return {workload: tuple(containers) for workload, containers in rows}


def instance_demands(
    recommendations: Iterable[WorkloadRecommendation], containers: dict[str, tuple[str, ...]] | None = None
) -> tuple[InstanceDemand, ...]:
    """One demand per confident move to another MIG profile, in a stable order."""
    out = []
    for rec in recommendations:
        u = rec.usage
        if (rec.confidence.is_low or rec.recommended_profile in (None, WHOLE_GPU_PROFILE)
                or rec.recommended_profile == u.current_profile or u.current_profile == "mixed"):
            continue
        try:
            model = model_by_name(u.gpu_model)
            new = model.profile(str(rec.recommended_profile))
            ge_now = 1.0 if u.current_profile == WHOLE_GPU_PROFILE else model.profile(u.current_profile).gpu_equivalents
        except ValueError:
            continue
        del new
        out.append(InstanceDemand(
            workload=u.key, namespace=u.namespace, kind=u.kind, name=u.name, tenant=u.tenant,
            model=model.short_name, profile=str(rec.recommended_profile),
            count=u.max_replicas * (rec.recommended_devices_per_pod or 1), current_profile=u.current_profile,
            current_ge=u.max_replicas * u.devices_per_pod * ge_now, containers=(containers or {}).get(u.key, ()),
            current_per_pod=u.devices_per_pod,
        ))
    return tuple(sorted(out, key=lambda d: d.workload))


_PENDING_SQL = """
SELECT tenant, cluster_queue, profile, gpu_model, count(DISTINCT ts) AS samples, max(quantity) AS most
FROM pending_demand WHERE ts BETWEEN $start AND $end AND profile <> 'gpu' AND coalesce(quantity, 1) > 0
GROUP BY ALL ORDER BY ALL
"""


def with_pending(
    con: duckdb.DuckDBPyConnection, start: datetime, end: datetime, demands: Iterable[InstanceDemand]
) -> tuple[InstanceDemand, ...]:
    """Each demand with the pending work its tenant's queue already has for the profile it moves to."""
    pending: dict[tuple[str, str, str], list[str]] = {}
    if table_exists(con, "pending_demand"):
        for tenant, queue, profile, model_name, samples, most in con.execute(
                _PENDING_SQL, {"start": start, "end": end}).fetchall():
            try:
                model = model_by_name(model_name).short_name if model_name else ""
            except ValueError:
                continue
            amount = "count not measured" if most is None else f"up to {most:g}"
            pending.setdefault((str(tenant), model, str(profile)), []).append(
                f"queue {queue or tenant} has pending work for {profile} in {samples} sample(s) ({amount})")
    out = []
    for d in demands:
        said = pending.get((d.tenant, d.model, d.profile)) or pending.get((d.tenant, "", d.profile))
        out.append(dataclasses.replace(d, pending="; ".join(said) + ": the move competes with it") if said else d)
    return tuple(out)


def load_layout_inputs(
    con: duckdb.DuckDBPyConnection, start: datetime, end: datetime, recommendations: Iterable[WorkloadRecommendation]
) -> tuple[tuple[GpuState, ...], tuple[InstanceDemand, ...]]:
    """GPU states and instance demands for ``plan_layout``."""
    demands = instance_demands(recommendations, load_containers(con, start, end))
    return load_gpu_states(con, start, end), with_pending(con, start, end, demands)


_STORED_SQL = """
WITH run AS (SELECT run_id, window_start, window_end FROM recommendations
             WHERE scope = 'workload' ORDER BY generated_at DESC, run_id LIMIT 1)
SELECT r.target_namespace, r.target_kind, r.target_name, coalesce(r.tenant, r.target_namespace), r.gpu_model,
       r.current_profile, r.recommended_profile, r.current_value, r.recommended_value, r.confidence_label,
       CAST(r.evidence AS VARCHAR), run.window_start, run.window_end
FROM recommendations r JOIN run USING (run_id)
WHERE r.scope = 'workload' ORDER BY r.target_namespace, r.target_kind, r.target_name
"""


def demands_from_stored_run(
    con: duckdb.DuckDBPyConnection,
) -> tuple[tuple[InstanceDemand, ...], datetime, datetime] | None:
    """The instance demands of the newest stored recommendation run and its window (None: no run)."""

    rows = con.execute(_STORED_SQL).fetchall()
    if not rows:
        return None
    start, end = rows[0][11], rows[0][12]
    containers = load_containers(con, start, end)
    out = []
    for ns, kind, name, tenant, model_name, current, recommended, cur_n, rec_n, label, evidence, _, _ in rows:
        if (label == "low" or recommended in (None, WHOLE_GPU_PROFILE) or recommended == current
                or current in (None, "mixed")):
            continue
        try:
            model = model_by_name(model_name)
            model.profile(recommended)
            ge_now = 1.0 if current == WHOLE_GPU_PROFILE else model.profile(current).gpu_equivalents
        except ValueError:
            continue
        replicas = int(json.loads(evidence or "{}").get("replicas") or 1)
        key = f"{ns}/{kind}/{name}"
        out.append(InstanceDemand(
            workload=key, namespace=ns, kind=kind, name=name, tenant=tenant, model=model.short_name,
            profile=recommended, count=replicas * int(rec_n or 1), current_profile=current,
            current_ge=replicas * float(cur_n or 1) * ge_now, containers=containers.get(key, ()),
            current_per_pod=int(cur_n or 1),
        ))
    return with_pending(con, start, end, out), start, end
