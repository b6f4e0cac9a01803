"""History of a simulated fleet as polars frames shaped like the store's tables (``source = 'sim'``).

Sample frames (``device_samples``, ``gpu_samples``, ``allocations``) hold one row per device / GPU /
holder at every ``step`` in [start, end); ``events`` holds the XID events in the window. Inventory
frames (``quota_snapshots``, ``pending_demand``, ``namespace_snapshots``, ``pod_snapshots``) are
sampled every ``scenario.inventory_step`` (5 minutes by default, never finer than ``step``) at
multiples of that step. Dimension frames (``nodes``, ``gpus``, ``devices``, ``tenants``) have one row
per key, first/last seen at the first/last sample.

Row rules that mirror what the exporter serves, so a collector sees the same values either way:
memory of a MIG GPU instance is on the row of its first compute instance only (the others have NULL,
as compute instances share it); readings of a GPU that is down are NULL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, Protocol

import numpy as np
import polars as pl

from gpulens.core.device_model import NodeSnapshot, SharingMode, allocatable_devices
from gpulens.core.errors import UserError
from gpulens.core.metric_catalog import DEVICE_ACTIVITY_RATIO
from gpulens.core.mig_catalog import model_by_name
from gpulens.sim.evaluate import NodeArrays
from gpulens.sim.faults import THERMAL_REASONS, XID_CODE, Schedule, faults_on
from gpulens.sim.plan import FleetPlan, NodePlan, PodPlan
from gpulens.sim.pods import pod_identity
from gpulens.sim.precursors import RecurringTrend, Trend, is_trend, trend_of
from gpulens.sim.scenario import FaultKind, Scenario, shape_resource
from gpulens.sim.topology import node_topology_labels, topology_rows
from gpulens.sim.workloads import batch_slots, pod_present


class FleetModel(Protocol):
    """What history is built from: a scenario, its placement plan and node readings over many times."""

    scenario: Scenario
    plan: FleetPlan

    def node_names(self) -> list[str]: ...

    def node_plan(self, node: str) -> NodePlan: ...

    def arrays(self, node: str, times: np.ndarray | list[float]) -> NodeArrays: ...


SOURCE = "sim"
ACTIVITY_SIGNAL = DEVICE_ACTIVITY_RATIO.name
"""What the simulated exporter's activity readings are recorded as (the series a collection reads)."""
TS = pl.Datetime("us")
S = pl.String
F = pl.Float64
I64 = pl.Int64
I32 = pl.Int32
B = pl.Boolean

# Column names and types of each frame, in the order of collector/schema.py (a test checks the match).
COLUMNS: dict[str, dict[str, Any]] = {
    "device_samples": {"ts": TS, "node": S, "gpu_uuid": S, "device_id": S, "activity_ratio": F,
                       "memory_used_bytes": I64, "memory_total_bytes": I64, "source": S, "activity_signal": S},
    "gpu_samples": {"ts": TS, "node": S, "gpu_uuid": S, "up": B, "power_watts": F, "energy_joules": F,
                    "temperature_celsius": F, "sm_clock_hz": F, "memory_clock_hz": F, "throttle_reasons": pl.List(S),
                    "ecc_corrected_total": I64, "ecc_uncorrected_total": I64, "retired_pages_total": I64,
                    "remapped_rows_failure": B, "pcie_replay_total": I64, "nvlink_crc_errors_total": I64,
                    "thermal_violation_seconds_total": F, "source": S},
    "allocations": {"ts": TS, "node": S, "gpu_uuid": S, "device_id": S, "namespace": S, "pod": S, "container": S,
                    "tenant": S, "sharing_mode": S, "gpu_equivalents": F, "workload_kind": S, "workload_name": S,
                    "source": S},
    "events": {"ts": TS, "node": S, "gpu_uuid": S, "device_id": S, "kind": S, "code": I32, "count": I64,
               "detail": S, "source": S},
    "nodes": {"node": S, "pool": S, "gpu_model": S, "sharing_mode": S, "nvlink_domain": S, "dedicated_tenant": S,
              "labels": S, "first_seen": TS, "last_seen": TS},
    "gpus": {"gpu_uuid": S, "node": S, "gpu_index": I32, "gpu_model": S, "memory_total_bytes": I64,
             "sharing_mode": S, "replicas": I32, "first_seen": TS, "last_seen": TS},
    "devices": {"device_id": S, "gpu_uuid": S, "node": S, "gpu_model": S, "kind": S, "profile": S,
                "gpu_instance_id": I32, "compute_instance_id": I32, "slices": I32, "gpu_equivalents": F,
                "memory_total_bytes": I64, "sharing_mode": S, "first_seen": TS, "last_seen": TS},
    "gpu_topology": {"gpu_uuid": S, "node": S, "gpu_index": I32, "numa_node": I32, "cpu_affinity": S,
                     "nvlink_domain": S, "nvlink_peers": I32, "fabric_cluster_uuid": S, "fabric_clique_id": I64,
                     "first_seen": TS, "last_seen": TS},
    "tenants": {"tenant": S, "cost_center": S, "dedicated_pool": S, "virtual_cluster": S},
    "resource_flavors": {"flavor": S, "node_labels": S, "first_seen": TS, "last_seen": TS},
    "quota_snapshots": {"ts": TS, "object_kind": S, "object_namespace": S, "object_name": S, "tenant": S,
                        "flavor": S, "resource": S, "nominal_quota": F, "borrowing_limit": F, "lending_limit": F,
                        "usage": F, "annotations": S, "source": S},
    "pending_demand": {"ts": TS, "tenant": S, "cluster_queue": S, "namespace": S, "flavor": S, "resource": S,
                       "profile": S, "gpu_model": S, "quantity": F, "workloads": I32, "source": S},
    "namespace_snapshots": {"ts": TS, "namespace": S, "tenant": S, "labels": S, "network_policies": I32,
                            "virtual_cluster": S, "source": S},
    "pod_snapshots": {"ts": TS, "namespace": S, "pod": S, "uid": S, "node": S, "phase": S, "tenant": S, "queue": S,
                      "workload_kind": S, "workload_name": S, "gpu_requests": S, "labels": S, "source": S},
}

XID_DETAIL = {
    79: "GPU has fallen off the bus", 48: "double-bit ECC error", 13: "graphics engine exception",
    92: "high single-bit ECC error rate", 63: "row-remapping event", 64: "row-remapping failure", 74: "NVLink error",
}


@dataclass(frozen=True)
class SimulatedHistory:
    """One polars frame per store table (see ``COLUMNS``)."""

    device_samples: pl.DataFrame
    gpu_samples: pl.DataFrame
    allocations: pl.DataFrame
    events: pl.DataFrame
    nodes: pl.DataFrame
    gpus: pl.DataFrame
    devices: pl.DataFrame
    gpu_topology: pl.DataFrame
    tenants: pl.DataFrame
    resource_flavors: pl.DataFrame
    quota_snapshots: pl.DataFrame
    pending_demand: pl.DataFrame
    namespace_snapshots: pl.DataFrame
    pod_snapshots: pl.DataFrame

    def frames(self) -> dict[str, pl.DataFrame]:
        """Table name -> frame."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def to_ts(t: np.ndarray | float) -> np.ndarray:
    """Unix seconds -> int64 microseconds (what a ``Datetime('us')`` column holds)."""
    return np.round(np.asarray(t, dtype=np.float64) * 1e6).astype(np.int64)


def _table(name: str, records: list[dict[str, object]], rec_idx: np.ndarray | None = None,
           **columns: np.ndarray | pl.Series) -> pl.DataFrame:
    """Rows of ``records`` (picked by ``rec_idx``, else each once) plus per-row ``columns``, typed as COLUMNS."""
    schema = COLUMNS[name]
    rec_cols = [c for c in schema if records and c in records[0]]
    base = pl.DataFrame(
        [{c: r.get(c) for c in rec_cols} for r in records],
        schema={c: (I64 if schema[c] == TS else schema[c]) for c in rec_cols}, orient="row",
    )
    if rec_idx is not None:
        base = base.select(pl.all().gather(rec_idx)) if rec_cols else base
        n = len(rec_idx)
    else:
        n = len(records)
    zeros = np.zeros(n, dtype=np.int64)
    out = []
    for col, dtype in schema.items():
        if col in columns:
            value = columns[col]
            series = value.alias(col) if isinstance(value, pl.Series) else pl.Series(col, value)
        elif col in rec_cols:
            series = base[col]
        elif col == "source":
            series = pl.Series(col, [SOURCE]).gather(zeros)
        else:
            series = pl.Series(col, [None], dtype=dtype).gather(zeros)
        if dtype == TS and series.dtype != TS:
            series = series.cast(I64).cast(TS)
        out.append(series.cast(dtype))
    return pl.DataFrame(out)


def _masked(values: np.ndarray, keep: np.ndarray, dtype: Any) -> pl.Series:
    """A series with NULL where ``keep`` is False (or the value is NaN)."""
    s = pl.Series(values, nan_to_null=values.dtype.kind == "f").cast(dtype)
    return s.set(pl.Series(~keep), None) if not keep.all() else s  # type: ignore[arg-type]


def _nulls(n: int, dtype: Any) -> pl.Series:
    return pl.Series([None], dtype=dtype).gather(np.zeros(n, dtype=np.int64))


def _empty(name: str) -> pl.DataFrame:
    return pl.DataFrame(schema=COLUMNS[name])


def _concat(name: str, parts: list[pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(parts) if parts else _empty(name)


def sample_times(start: float, end: float, step: float) -> np.ndarray:
    """Times start, start+step, ... before end."""
    if not step > 0:
        raise UserError(f"history step must be positive seconds, got {step!r}")
    n = max(0, int(np.ceil((end - start) / step)))
    return start + np.arange(n, dtype=np.float64) * step


def build_history(
    fleet: FleetModel, start: float, end: float, step: float, nodes: list[str] | None
) -> SimulatedHistory:
    """See ``SimulatedFleet.history``."""
    names = fleet.node_names() if nodes is None else list(nodes)
    t = sample_times(start, end, step)
    dev_frames, gpu_frames, alloc_frames = [], [], []
    for name in names:
        plan = fleet.node_plan(name)
        a = fleet.arrays(name, t)
        dev_frames.append(_device_samples(plan, a))
        gpu_frames.append(_gpu_samples(plan, a))
        alloc_frames.append(_allocations(fleet.scenario.seed, plan, a))
    first_seen = float(t[0]) if len(t) else start
    last_seen = float(t[-1]) if len(t) else start
    inv_t = _inventory_times(start, end, max(step, fleet.scenario.inventory_step))
    return SimulatedHistory(
        device_samples=_concat("device_samples", dev_frames),
        gpu_samples=_concat("gpu_samples", gpu_frames),
        allocations=_concat("allocations", alloc_frames),
        events=_events(fleet, names, start, end),
        **_dimensions(fleet, names, first_seen, last_seen),
        **_inventory(fleet, inv_t),
    )


def _device_samples(plan: NodePlan, a: NodeArrays) -> pl.DataFrame:
    n_d, n_t = len(plan.devices), len(a.t)
    up = a.gpu_up[[d.gpu_index for d in plan.devices]]
    first = np.array([d.gi_first == d.index for d in plan.devices])[:, None] & up
    totals = np.array([d.memory_total_bytes for d in plan.devices], dtype=np.int64)[:, None] * np.ones(n_t, np.int64)
    records: list[dict[str, object]] = [
        {"node": plan.name, "gpu_uuid": d.gpu_uuid, "device_id": d.uuid} for d in plan.devices
    ]
    activity = _masked(a.dev_activity.ravel(), up.ravel(), F)
    return _table(
        "device_samples", records, np.repeat(np.arange(n_d), n_t), ts=np.tile(to_ts(a.t), n_d),
        activity_ratio=activity,
        memory_used_bytes=_masked(a.dev_memory.ravel(), first.ravel(), I64),
        memory_total_bytes=_masked(totals.ravel(), first.ravel(), I64),
        # the simulated exporter's own series (what a collection of its /metrics records)
        activity_signal=pl.select(
            pl.when(activity.is_not_null()).then(pl.lit(ACTIVITY_SIGNAL))
        ).to_series(),
    )


def _gpu_samples(plan: NodePlan, a: NodeArrays) -> pl.DataFrame:
    n_g, n_t = len(plan.gpus), len(a.t)
    n = n_g * n_t
    mig = plan.pool.sharing is SharingMode.MIG
    up = a.gpu_up.ravel()
    reasons = pl.select(
        pl.when(pl.lit(pl.Series(a.throttled.ravel())))
        .then(pl.lit(list(THERMAL_REASONS), dtype=pl.List(S)))
        .otherwise(pl.lit([], dtype=pl.List(S)))
    ).to_series()
    records: list[dict[str, object]] = [{"node": plan.name, "gpu_uuid": g.uuid} for g in plan.gpus]
    return _table(
        "gpu_samples", records, np.repeat(np.arange(n_g), n_t), ts=np.tile(to_ts(a.t), n_g), up=pl.Series(up),
        power_watts=_masked(a.power.ravel(), up, F),
        energy_joules=_masked(a.energy.ravel(), up, F),
        temperature_celsius=_masked(a.temperature.ravel(), up, F),
        sm_clock_hz=_masked(a.sm_clock.ravel(), up, F),
        memory_clock_hz=_masked(a.memory_clock.ravel(), up, F),
        throttle_reasons=reasons.set(pl.Series(~up), None) if not up.all() else reasons,  # type: ignore[arg-type]
        ecc_corrected_total=_masked(a.ecc_corrected.ravel(), up, I64),
        ecc_uncorrected_total=_masked(a.ecc_uncorrected.ravel(), up, I64),
        retired_pages_total=(_masked(a.retired_pages.ravel(), up, I64) if a.retired_pages is not None
                             else _nulls(n, I64)),
        remapped_rows_failure=_nulls(n, B) if mig else _masked(a.remap_failure.ravel(), up, B),
        pcie_replay_total=_masked(a.pcie_replay.ravel(), up, I64),
        nvlink_crc_errors_total=_nulls(n, I64) if mig else _masked(a.nvlink_crc.ravel(), up, I64),
        thermal_violation_seconds_total=_masked(a.thermal_seconds.ravel(), up, F),
    )


def _pod_names(seed: int, pod: PodPlan, t: np.ndarray) -> tuple[list[tuple[str, str]], np.ndarray]:
    """(name, uid) of each distinct pod incarnation over ``t``, and which one each time uses."""
    if pod.archetype != "batch":
        return [pod_identity(seed, pod, -1)], np.zeros(len(t), dtype=np.int64)
    uniq, inv = np.unique(batch_slots(pod, t), return_inverse=True)
    return [pod_identity(seed, pod, int(x)) for x in uniq], inv.reshape(-1)


def _allocations(seed: int, plan: NodePlan, a: NodeArrays) -> pl.DataFrame:
    """One row per holding while its pod exists."""
    ts = to_ts(a.t)
    records: list[dict[str, object]] = []
    names: list[str] = []
    rec_idx, t_idx, name_idx = [], [], []
    for pod in plan.pods:
        idx = np.nonzero(a.pod_present[pod.index])[0]
        if not len(idx):
            continue
        ids, inv = _pod_names(seed, pod, a.t[idx])
        offset = len(names)
        names.extend(i[0] for i in ids)
        for hi in pod.holdings:
            h = plan.holdings[hi]
            d = plan.devices[h.device]
            rec_idx.append(np.full(len(idx), len(records)))
            t_idx.append(idx)
            name_idx.append(inv + offset)
            records.append({
                "node": plan.name, "gpu_uuid": d.gpu_uuid, "device_id": d.uuid, "namespace": pod.namespace,
                "container": pod.container, "tenant": pod.tenant, "sharing_mode": str(plan.pool.sharing),
                "gpu_equivalents": h.gpu_equivalents, "workload_kind": pod.workload.workload_kind,
                "workload_name": pod.workload.name,
            })
    if not records:
        return _empty("allocations")
    return _table(
        "allocations", records, np.concatenate(rec_idx), ts=ts[np.concatenate(t_idx)],
        pod=pl.Series(names).gather(np.concatenate(name_idx)),
    )


def _inventory_times(start: float, end: float, step: float) -> np.ndarray:
    first = np.ceil(start / step) * step
    return sample_times(first, end, step) if first < end else np.zeros(0)


def _events(fleet: FleetModel, names: list[str], start: float, end: float) -> pl.DataFrame:
    s = fleet.scenario
    records: list[dict[str, object]] = []
    for name in names:
        plan = fleet.node_plan(name)
        for g in plan.gpus:
            for f in faults_on(s.faults, name, g.index):
                if is_trend(f):
                    records.extend(_trend_events(trend_of(f, s.seed), s.epoch_seconds, start, end, name, g.uuid))
                    continue
                if f.kind is FaultKind.THERMAL:
                    continue
                code = XID_CODE[f.kind]
                device = None
                if f.kind is FaultKind.XID13:
                    device = plan.devices[g.devices[min(f.device or 0, len(g.devices) - 1)]].uuid
                detail = XID_DETAIL[code] + (f" ({f.count} errors)" if f.kind is FaultKind.XID48 else "")
                for rel in Schedule.of(f).occurrences(start - s.epoch_seconds, end - s.epoch_seconds):
                    records.append({
                        "ts": int(to_ts(rel + s.epoch_seconds)), "node": name, "gpu_uuid": g.uuid, "device_id": device,
                        "kind": "xid", "code": code, "count": 1, "detail": detail,
                    })
    return _table("events", records).sort("ts", "gpu_uuid") if records else _empty("events")


def _trend_events(
    trend: Trend | RecurringTrend, epoch: float, start: float, end: float, node: str, gpu_uuid: str
) -> list[dict[str, object]]:
    """XID rows of a degradation or look-alike in [start, end)."""
    return [
        {"ts": int(to_ts(rel + epoch)), "node": node, "gpu_uuid": gpu_uuid, "device_id": None, "kind": "xid",
         "code": code, "count": 1, "detail": XID_DETAIL.get(code, f"XID {code}")}
        for rel, code in trend.events_until(end - epoch) if start <= rel + epoch < end
    ]


def _dimensions(fleet: FleetModel, names: list[str], first: float, last: float) -> dict[str, pl.DataFrame]:
    s = fleet.scenario
    seen = {"first_seen": int(to_ts(first)), "last_seen": int(to_ts(last))}
    node_rows: list[dict[str, object]] = []
    gpu_rows: list[dict[str, object]] = []
    dev_rows: list[dict[str, object]] = []
    topo_rows: list[dict[str, object]] = []
    for name in names:
        p = fleet.node_plan(name)
        topo_rows.extend(topology_rows(p, seen))
        node_rows.append({
            "node": name, "pool": p.pool.name, "gpu_model": p.model.name, "sharing_mode": str(p.pool.sharing),
            "nvlink_domain": name, "dedicated_tenant": p.pool.dedicated_tenant,
            "labels": json.dumps(
                {**node_labels(p.pool.labels, p.model.name, p.pool.sharing), **node_topology_labels(p.pool, name)},
                sort_keys=True,
            ), **seen,
        })
        gpu_rows.extend({
            "gpu_uuid": g.uuid, "node": name, "gpu_index": g.index, "gpu_model": g.model.name,
            "memory_total_bytes": g.model.memory_bytes, "sharing_mode": str(g.sharing), "replicas": g.replicas, **seen,
        } for g in p.gpus)
        dev_rows.extend({
            "device_id": d.uuid, "gpu_uuid": d.gpu_uuid, "node": name, "gpu_model": p.model.name, "kind": d.kind,
            "profile": d.profile, "gpu_instance_id": d.gpu_instance_id, "compute_instance_id": d.compute_instance_id,
            "slices": d.slices, "gpu_equivalents": d.compute_share, "memory_total_bytes": d.memory_total_bytes,
            "sharing_mode": str(p.pool.sharing), **seen,
        } for d in p.devices)
    tenants: list[dict[str, object]] = [
        {"tenant": t.name, "cost_center": t.cost_center,
         "dedicated_pool": next((p.name for p in s.pools if p.dedicated_tenant == t.name), None),
         "virtual_cluster": next((ns.virtual_cluster for ns in t.namespaces if ns.virtual_cluster), None)}
        for t in s.tenants
    ]
    flavors: dict[str, dict[str, object]] = {}
    for pool in s.pools:  # a ResourceFlavor selects its pool's nodes by their labels (as gpulens.sim.cluster)
        flavors.setdefault(pool.flavor_name, {"flavor": pool.flavor_name,
                                              "node_labels": json.dumps(pool.flavor_labels, sort_keys=True), **seen})
    return {
        "resource_flavors": _table("resource_flavors", list(flavors.values())),
        "nodes": _table("nodes", node_rows) if node_rows else _empty("nodes"),
        "gpus": _table("gpus", gpu_rows) if gpu_rows else _empty("gpus"),
        "devices": _table("devices", dev_rows) if dev_rows else _empty("devices"),
        "gpu_topology": _table("gpu_topology", topo_rows) if topo_rows else _empty("gpu_topology"),
        "tenants": _table("tenants", tenants),
    }


def node_labels(pool_labels: dict[str, str], model: str, sharing: SharingMode) -> dict[str, str]:
    """Kubernetes labels of a simulated node."""
    return {"nvidia.com/gpu.product": model.replace(" ", "-"), "gpulens.io/sharing-mode": str(sharing), **pool_labels}


def _inventory(fleet: FleetModel, t: np.ndarray) -> dict[str, pl.DataFrame]:
    """Quota, pending, namespace and pod snapshots at the inventory times (same values as cluster_state)."""
    from gpulens.sim.cluster import RESOURCE_QUOTA_NAME, pod_labels

    s = fleet.scenario
    n_t = len(t)
    if n_t == 0:
        return {k: _empty(k) for k in ("quota_snapshots", "pending_demand", "namespace_snapshots", "pod_snapshots")}
    ts = to_ts(t)
    usage: dict[tuple[str, str, str], np.ndarray] = {}
    pods: list[dict[str, object]] = []
    ids: list[tuple[str, str]] = []
    rec_idx, t_idx, id_idx = [], [], []
    for node in fleet.plan.nodes.values():
        for pod in node.pods:
            present = pod_present(s.seed, pod, t)
            for res, qty in pod.requests.items():
                key = ("", pod.namespace, f"requests.{res}")
                usage[key] = usage.get(key, np.zeros(n_t)) + present * qty
            if pod.cluster_queue:
                for res, qty in pod.requests.items():
                    key = (pod.cluster_queue, pod.flavor, res)
                    usage[key] = usage.get(key, np.zeros(n_t)) + present * qty
            idx = np.nonzero(present)[0]
            if not len(idx):
                continue
            incarnations, inv = _pod_names(s.seed, pod, t[idx])
            rec_idx.append(np.full(len(idx), len(pods)))
            t_idx.append(idx)
            id_idx.append(inv + len(ids))
            ids.extend(incarnations)
            pods.append({
                "namespace": pod.namespace, "node": node.name, "phase": "Running", "tenant": pod.tenant,
                "queue": pod.queue, "workload_kind": pod.workload.workload_kind, "workload_name": pod.workload.name,
                "gpu_requests": json.dumps(pod.requests, sort_keys=True),
                "labels": json.dumps(pod_labels(pod.queue, pod.workload.name, pod.workload.labels), sort_keys=True),
            })
    quotas: list[dict[str, object]] = []
    quota_usage = []
    pending: list[dict[str, object]] = []
    namespaces: list[dict[str, object]] = []
    for ten in s.tenants:
        cq = ten.queue_name
        for q in ten.quotas:
            quotas.append({
                "object_kind": "ClusterQueue", "object_namespace": "", "object_name": cq, "tenant": ten.name,
                "flavor": q.flavor, "resource": q.resource, "nominal_quota": q.nominal,
                "borrowing_limit": q.borrowing_limit, "lending_limit": q.lending_limit,
            })
            quota_usage.append(usage.get((cq, q.flavor, q.resource), np.zeros(n_t)))
        pending.extend({
            "tenant": ten.name, "cluster_queue": cq, "namespace": p.namespace or ten.namespaces[0].name,
            "flavor": p.flavor, "resource": shape_resource(p.shape), "profile": p.shape,
            "gpu_model": model_by_name(p.gpu_model).name, "quantity": p.quantity * p.workloads,
            "workloads": p.workloads,
        } for p in ten.pending)
        for ns in ten.namespaces:
            for res, hard in ns.resource_quota.items():
                quotas.append({
                    "object_kind": "ResourceQuota", "object_namespace": ns.name, "object_name": RESOURCE_QUOTA_NAME,
                    "tenant": ten.name, "flavor": "", "resource": res, "nominal_quota": hard,
                })
                quota_usage.append(usage.get(("", ns.name, res), np.zeros(n_t)))
        namespaces.extend({
            "namespace": ns.name, "tenant": ten.name, "labels": json.dumps(ns.labels, sort_keys=True),
            "network_policies": ns.network_policies, "virtual_cluster": ns.virtual_cluster,
        } for ns in ten.namespaces)

    def per_time(name: str, records: list[dict[str, object]], **cols: np.ndarray) -> pl.DataFrame:
        if not records:
            return _empty(name)
        r = len(records)
        return _table(name, records, np.repeat(np.arange(r), n_t), ts=np.tile(ts, r), **cols)

    pod_frame = _empty("pod_snapshots")
    if pods:
        all_ids = np.concatenate(id_idx)
        pod_frame = _table(
            "pod_snapshots", pods, np.concatenate(rec_idx), ts=ts[np.concatenate(t_idx)],
            pod=pl.Series([i[0] for i in ids]).gather(all_ids), uid=pl.Series([i[1] for i in ids]).gather(all_ids),
        )
    return {
        "quota_snapshots": per_time("quota_snapshots", quotas,
                                    usage=np.concatenate(quota_usage) if quota_usage else np.zeros(0)),
        "pending_demand": per_time("pending_demand", pending),
        "namespace_snapshots": per_time("namespace_snapshots", namespaces),
        "pod_snapshots": pod_frame,
    }


def snapshot_rows(snap: NodeSnapshot) -> dict[str, list[dict[str, object]]]:
    """The ``device_samples``, ``gpu_samples`` and ``allocations`` rows a snapshot stands for (same rules)."""
    ts = int(to_ts(snap.timestamp))
    dev, gpu, alloc = [], [], []
    device_gpu = {}
    for g in snap.gpus:
        h = g.health
        gpu.append({
            "ts": ts, "node": snap.node, "gpu_uuid": g.uuid, "up": g.up, "power_watts": h.power_watts,
            "energy_joules": h.energy_joules, "temperature_celsius": h.temperature_celsius,
            "sm_clock_hz": h.sm_clock_hz, "memory_clock_hz": h.memory_clock_hz,
            "throttle_reasons": sorted(h.throttle_reasons) if g.up else None,
            "ecc_corrected_total": h.ecc_corrected_total, "ecc_uncorrected_total": h.ecc_uncorrected_total,
            "retired_pages_total": h.retired_pages_total, "remapped_rows_failure": h.remapped_rows_failure,
            "pcie_replay_total": h.pcie_replay_total, "nvlink_crc_errors_total": h.nvlink_crc_errors_total,
            "thermal_violation_seconds_total": h.thermal_violation_seconds_total, "source": SOURCE,
        })
        for d in allocatable_devices(g):
            device_gpu[d.uuid] = g.uuid
            m = d.mig
            if m is None:  # the whole GPU is the device
                dev.append({
                    "ts": ts, "node": snap.node, "gpu_uuid": g.uuid, "device_id": g.uuid,
                    "activity_ratio": g.activity_ratio, "memory_used_bytes": g.memory_used_bytes,
                    "memory_total_bytes": g.memory_total_bytes if g.up else None, "source": SOURCE,
                    "activity_signal": None if g.activity_ratio is None else ACTIVITY_SIGNAL,
                })
                continue
            first = d.carries_memory and g.up
            dev.append({
                "ts": ts, "node": snap.node, "gpu_uuid": g.uuid, "device_id": m.uuid,
                "activity_ratio": m.activity_ratio, "memory_used_bytes": m.memory_used_bytes if first else None,
                "memory_total_bytes": m.memory_total_bytes if first else None, "source": SOURCE,
                "activity_signal": None if m.activity_ratio is None else ACTIVITY_SIGNAL,
            })
    for a in snap.allocations:
        alloc.append({
            "ts": ts, "node": snap.node, "gpu_uuid": device_gpu[a.device_id], "device_id": a.device_id,
            "namespace": a.namespace, "pod": a.pod, "container": a.container, "tenant": a.tenant,
            "sharing_mode": str(a.sharing_mode), "gpu_equivalents": a.gpu_equivalents,
            "workload_kind": a.workload_kind, "workload_name": a.workload_name, "source": SOURCE,
        })
    return {"device_samples": dev, "gpu_samples": gpu, "allocations": alloc}
