"""The simulated fleet: node snapshots, device/allocation sources, cluster state and history at any time.

Everything is a pure function of (scenario, seed, t): no state is carried between calls, so any
timestamp can be evaluated, in any order. ``history(t0, t1, step)`` evaluates the same model as
``node_snapshot`` over a vector of times, so the two always agree.
"""

from __future__ import annotations

import math
import threading
from dataclasses import replace
from functools import lru_cache

import numpy as np

from gpulens.core.device_model import (
    Allocation,
    DeviceReadings,
    Gpu,
    GpuProcess,
    HealthReadings,
    MigInstance,
    NodeSnapshot,
    SharingMode,
)
from gpulens.core.errors import UserError
from gpulens.sim.cluster import ClusterState, build_cluster_state
from gpulens.sim.constants import NodeConstants
from gpulens.sim.evaluate import NodeArrays, evaluate, node_constants
from gpulens.sim.faults import THERMAL_REASONS
from gpulens.sim.history import SimulatedHistory, build_history
from gpulens.sim.noise import stable_key
from gpulens.sim.plan import FleetPlan, NodePlan, build_plan
from gpulens.sim.pods import pod_identity
from gpulens.sim.power import PowerLedger
from gpulens.sim.scenario import Scenario
from gpulens.sim.topology import node_topology


def _opt(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


@lru_cache(maxsize=65536)
def process_pid(pod_key: int, slot: int, holding: int) -> int:
    """A deterministic PID for a holding's process."""
    return 1000 + stable_key(0, "pid", pod_key, slot, holding) % 4_000_000


class SimulatedFleet:
    """A fleet described by a scenario, evaluated at any virtual time."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        try:
            self.plan: FleetPlan = build_plan(scenario)
        except ValueError as exc:
            raise UserError(f"scenario {scenario.name!r}: {exc}") from None
        self._constants: dict[str, NodeConstants] = {}
        self._ledgers: dict[str, PowerLedger] = {}
        self._ledger_lock = threading.Lock()

    def _node_constants(self, node: str) -> NodeConstants:
        found = self._constants.get(node)
        if found is None:  # a race only builds the same immutable value twice
            found = self._constants[node] = node_constants(self.scenario, self.node_plan(node))
        return found

    def _ledger(self, node: str) -> PowerLedger:
        """The node's power gauge and energy counter, with their per-day cache (one per node and fleet)."""
        with self._ledger_lock:
            found = self._ledgers.get(node)
            if found is None:
                found = self._ledgers[node] = PowerLedger(self.scenario, self.node_plan(node),
                                                          self._node_constants(node))
            return found

    def node_names(self) -> list[str]:
        """Node names in scenario order; the first is the scenario's default node."""
        return list(self.plan.nodes)

    def node_plan(self, node: str) -> NodePlan:
        try:
            return self.plan.nodes[node]
        except KeyError:
            known = ", ".join(self.plan.nodes)
            raise UserError(f"unknown node {node!r} in scenario {self.scenario.name!r} (known: {known})") from None

    def arrays(self, node: str, times: np.ndarray | list[float]) -> NodeArrays:
        """Raw readings of ``node`` over many times (what ``history`` is built from)."""
        return evaluate(self.scenario, self.node_plan(node), times, self._node_constants(node), self._ledger(node))

    def node_snapshot(self, node: str, t: float) -> NodeSnapshot:
        """The node at time ``t``: GPUs with MIG instances and health, allocations, processes."""
        plan = self.node_plan(node)
        a = evaluate(self.scenario, plan, [t], self._node_constants(node), self._ledger(node))
        gpus = self._gpus(plan, a)
        return NodeSnapshot(
            node=node, timestamp=float(t), gpus=gpus, allocations=self._allocations(plan, a),
            processes=self._processes(plan, a),
        )

    def source(self, node: str, *, attribute_processes: bool = True) -> SimulatedSource:
        """A DeviceSource and AllocationSource for one node (``attribute_processes`` as the exporter's flag)."""
        self.node_plan(node)
        return SimulatedSource(self, node, attribute_processes=attribute_processes)

    def cluster_state(self, t: float) -> ClusterState:
        """Tenants, namespaces, Kueue queues, pods and pending demand at time ``t``."""
        return build_cluster_state(self.scenario, self.plan, t)

    def history(
        self, start: float, end: float, step: float | None = None, nodes: list[str] | None = None
    ) -> SimulatedHistory:
        """Samples in [start, end) every ``step`` seconds, as polars frames shaped like the store's tables."""
        return build_history(self, start, end, self.scenario.step if step is None else step, nodes)

    # -- snapshot pieces -------------------------------------------------------------------------
    def _gpus(self, plan: NodePlan, a: NodeArrays) -> tuple[Gpu, ...]:
        out = []
        topologies, domains = node_topology(plan)
        for g in plan.gpus:
            up = bool(a.gpu_up[g.index, 0])
            instances = []
            if g.sharing is SharingMode.MIG:
                for di in g.devices:
                    d = plan.devices[di]
                    instances.append(
                        MigInstance(
                            uuid=d.uuid, parent_uuid=g.uuid, gpu_instance_id=d.gpu_instance_id or 0,
                            compute_instance_id=d.compute_instance_id or 0, profile=d.profile, slices=d.slices or 0,
                            memory_total_bytes=d.memory_total_bytes,
                            memory_used_bytes=int(a.dev_memory[di, 0]) if up else None,
                            activity_ratio=_opt(a.dev_activity[di, 0]),
                            compute_instance_slices=d.compute_instance_slices,
                        )
                    )
                activity = _opt(a.gpu_activity[g.index, 0])
            else:
                activity = _opt(a.dev_activity[g.devices[0], 0])
            out.append(
                Gpu(
                    uuid=g.uuid, index=g.index, model=g.model.name, memory_total_bytes=g.model.memory_bytes,
                    sharing_mode=g.sharing, up=up, memory_used_bytes=int(a.gpu_memory[g.index, 0]) if up else None,
                    activity_ratio=activity, mig_instances=tuple(instances), replicas=g.replicas,
                    health=self._health(plan, a, g.index, up), nvlink_domain=domains[g.index],
                    driver_version=self.scenario.driver_version, topology=topologies[g.index],
                )
            )
        return tuple(out)

    def _health(self, plan: NodePlan, a: NodeArrays, gi: int, up: bool) -> HealthReadings:
        xid_counts = {code: int(c[gi, 0]) for code, c in a.xid_counts.items() if gi in a.xid_gpus[code]}
        xid_last = {code: float(v[gi, 0]) for code, v in a.xid_last.items() if not math.isnan(v[gi, 0])}
        if not up:
            return HealthReadings(xid_counts=xid_counts, xid_last_seen=xid_last)
        mig = plan.pool.sharing is SharingMode.MIG
        return HealthReadings(
            temperature_celsius=float(a.temperature[gi, 0]),
            power_watts=float(a.power[gi, 0]),
            energy_joules=float(a.energy[gi, 0]),
            sm_clock_hz=float(a.sm_clock[gi, 0]),
            memory_clock_hz=float(a.memory_clock[gi, 0]),
            throttle_reasons=frozenset(THERMAL_REASONS) if a.throttled[gi, 0] else frozenset(),
            ecc_corrected_total=int(a.ecc_corrected[gi, 0]),
            ecc_uncorrected_total=int(a.ecc_uncorrected[gi, 0]),
            retired_pages_total=int(a.retired_pages[gi, 0]) if a.retired_pages is not None else None,
            remapped_rows_failure=None if mig else bool(a.remap_failure[gi, 0]),
            pcie_replay_total=int(a.pcie_replay[gi, 0]),
            nvlink_crc_errors_total=None if mig else int(a.nvlink_crc[gi, 0]),
            thermal_violation_seconds_total=float(a.thermal_seconds[gi, 0]),
            xid_counts=xid_counts,
            xid_last_seen=xid_last,
        )

    def _allocations(self, plan: NodePlan, a: NodeArrays) -> tuple[Allocation, ...]:
        out = []
        seed = self.scenario.seed
        for pod in plan.pods:
            if not a.pod_present[pod.index, 0]:
                continue
            name, uid = pod_identity(seed, pod, int(a.pod_slot[pod.index, 0]))
            for hi in pod.holdings:
                h = plan.holdings[hi]
                d = plan.devices[h.device]
                out.append(
                    Allocation(
                        device_id=d.uuid, namespace=pod.namespace, pod=name, container=pod.container,
                        tenant=pod.tenant, sharing_mode=plan.pool.sharing, gpu_equivalents=h.gpu_equivalents,
                        replica=h.replica, pod_uid=uid, workload_kind=pod.workload.workload_kind,
                        workload_name=pod.workload.name, queue=pod.queue,
                    )
                )
        return tuple(out)

    def _processes(self, plan: NodePlan, a: NodeArrays) -> tuple[GpuProcess, ...]:
        out = []
        seed = self.scenario.seed
        mig = plan.pool.sharing is SharingMode.MIG
        for pod in plan.pods:
            if not a.pod_present[pod.index, 0]:
                continue
            slot = int(a.pod_slot[pod.index, 0])
            _, uid = pod_identity(seed, pod, slot)
            for hi in pod.holdings:
                h = plan.holdings[hi]
                d = plan.devices[h.device]
                if not a.gpu_up[d.gpu_index, 0]:
                    continue
                out.append(
                    GpuProcess(
                        pid=process_pid(pod.key, slot, hi), device_id=d.uuid,
                        used_memory_bytes=int(a.hold_memory[hi, 0]),
                        sm_utilization_ratio=None if mig else float(a.hold_activity[hi, 0]),
                        pod_uid=uid,
                    )
                )
        return tuple(out)


def _xids_since(gpu: Gpu, base: dict[int, int]) -> Gpu:
    """``gpu`` with XID counts since ``base`` (the counts at the first read) and only their last-seen times."""
    h = gpu.health
    if not h.xid_counts:
        return gpu
    counts = {code: max(0, n - base.get(code, 0)) for code, n in h.xid_counts.items()}
    last = {code: ts for code, ts in h.xid_last_seen.items() if counts.get(code, 0) > 0}
    return replace(gpu, health=replace(h, xid_counts=counts, xid_last_seen=last))


class SimulatedSource:
    """One simulated node as both a DeviceSource and an AllocationSource, as an exporter on it sees it.

    ``reads`` counts device reads. Reading devices and allocations for the same ``now`` (as a collection
    cycle does) evaluates the node once. Like the NVML source: XID counts (and last-seen times) are events
    since this source's first read, so they start at 0; with ``attribute_processes`` off, GPU processes
    carry no pod UID (no hostPID), so per-pod activity falls back to allocated share x device activity.
    It is not :class:`~gpulens.core.device_model.ErrorCounting`: a simulated read has no partial failures
    (simulated faults are readings, such as XIDs and lost GPUs, not errors of the source).
    """

    def __init__(self, fleet: SimulatedFleet, node: str, *, attribute_processes: bool = True) -> None:
        self.fleet = fleet
        self.node = node
        self.attribute_processes = attribute_processes
        self._xid_base: dict[str, dict[int, int]] | None = None
        self._readings: tuple[NodeSnapshot, tuple[Gpu, ...], tuple[GpuProcess, ...]] | None = None
        self.reads = 0
        self.allocation_reads = 0
        self.closed = False
        self._lock = threading.Lock()
        self._last: NodeSnapshot | None = None

    def _snapshot(self, now: float) -> NodeSnapshot:
        last = self._last
        if last is not None and last.timestamp == float(now):
            return last
        snap = self.fleet.node_snapshot(self.node, now)
        self._last = snap
        return snap

    def read_devices(self, now: float) -> DeviceReadings:
        with self._lock:
            self.reads += 1
            snap = self._snapshot(now)
            if self._xid_base is None:
                self._xid_base = {g.uuid: dict(g.health.xid_counts) for g in snap.gpus}
            cached = self._readings
            if cached is None or cached[0] is not snap:  # one derivation per evaluated instant
                processes = snap.processes
                if not self.attribute_processes:
                    processes = tuple(replace(p, pod_uid=None) for p in processes)
                gpus = tuple(_xids_since(g, self._xid_base.get(g.uuid, {})) for g in snap.gpus)
                cached = self._readings = (snap, gpus, processes)
        _, gpus, processes = cached
        return DeviceReadings(node=self.node, timestamp=snap.timestamp, gpus=gpus, processes=processes)

    def read_allocations(self, now: float) -> tuple[Allocation, ...]:
        with self._lock:
            self.allocation_reads += 1
            return self._snapshot(now).allocations

    def close(self) -> None:
        self.closed = True
