"""The static layout of a simulated fleet: nodes, GPUs, devices (MIG instances), pods and their devices.

Built once from a scenario. Identities (UUIDs, GI/CI ids, pod names) are deterministic from the seed.
Pods are placed first-fit, in workload order, on free device slots of the requested shape; a workload
that does not fit is a scenario problem (``ValueError`` naming the workload).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulens.core.device_model import WHOLE_GPU_PROFILE, SharingMode
from gpulens.core.mig_catalog import GpuModel
from gpulens.core.vocabulary import COMPUTE_SLICES, slices_gpu_equivalents
from gpulens.sim.noise import stable_key, stable_uuid
from gpulens.sim.scenario import (
    Archetype,
    PoolSpec,
    Scenario,
    WorkloadSpec,
    device_shapes,
    shape_resource,
)

# GPU-instance ids NVML hands out per compute-slice count (first free wins); matches the H200 capture
# (3g -> 2, 2g -> 3, 1g -> 9, 10).
_GI_IDS = {7: [0], 4: [1], 3: [2, 1], 2: [3, 4, 5], 1: [9, 10, 11, 12, 13, 14, 7, 8]}

_CONTAINER = {
    Archetype.TRAINING: "trainer",
    Archetype.INFERENCE: "server",
    Archetype.NOTEBOOK: "notebook",
    Archetype.BATCH: "eval",
}


@dataclass(frozen=True)
class DevicePlan:
    """One allocatable device: a whole GPU or a MIG compute instance."""

    index: int
    """Index within the node."""
    uuid: str
    gpu_index: int
    gpu_uuid: str
    kind: str
    """``gpu`` or ``mig``."""
    profile: str
    """``gpu`` or the GI profile."""
    shape: str
    """What a pod requests: ``gpu``, the GI profile, or ``<c>c.<profile>`` for a split GI."""
    gpu_instance_id: int | None
    compute_instance_id: int | None
    slices: int | None
    compute_instance_slices: int | None
    memory_total_bytes: int
    """Memory of the whole GPU or of the GPU instance (shared by its compute instances)."""
    gi_first: int
    """Node index of the first device of the same GPU instance (the one that reports GI memory)."""
    replicas: int
    gpu_equivalents: float

    @property
    def compute_share(self) -> float:
        """Fraction of the GPU's compute this device has."""
        if self.kind == "gpu":
            return 1.0
        return slices_gpu_equivalents(self.compute_instance_slices or self.slices or COMPUTE_SLICES)

    @property
    def memory_share(self) -> float:
        """Fraction of the GI memory one holder of this device may fill."""
        if self.kind == "mig" and self.compute_instance_slices and self.slices:
            return self.compute_instance_slices / self.slices
        return 1.0


@dataclass(frozen=True)
class GpuPlan:
    index: int
    uuid: str
    model: GpuModel
    sharing: SharingMode
    replicas: int
    devices: tuple[int, ...]


@dataclass(frozen=True)
class HoldingPlan:
    """One device slot held by one pod (a pod with 8 GPUs has 8 holdings)."""

    index: int
    """Index within the node."""
    pod: int
    """Index of the pod within the node."""
    device: int
    replica: int | None
    gpu_equivalents: float
    key: int
    """Noise key of this holding."""


@dataclass(frozen=True)
class PodPlan:
    """A pod slot of a workload. Batch pods change name and uid every time slot."""

    index: int
    workload: WorkloadSpec
    ordinal: int
    """Pod number within the workload."""
    tenant: str
    namespace: str
    queue: str | None
    cluster_queue: str | None
    container: str
    base_name: str
    node: str
    flavor: str
    key: int
    holdings: tuple[int, ...]

    @property
    def archetype(self) -> Archetype:
        return self.workload.archetype

    @property
    def requests(self) -> dict[str, float]:
        return {shape_resource(self.workload.shape): float(self.workload.devices_per_pod)}


@dataclass(frozen=True)
class NodePlan:
    name: str
    pool: PoolSpec
    model: GpuModel
    gpus: tuple[GpuPlan, ...]
    devices: tuple[DevicePlan, ...]
    pods: tuple[PodPlan, ...]
    holdings: tuple[HoldingPlan, ...]


@dataclass(frozen=True)
class FleetPlan:
    scenario: Scenario
    nodes: dict[str, NodePlan]


def _gpu_uuid(seed: int, node: str, index: int) -> str:
    return "GPU-" + stable_uuid(seed, "gpu", node, index)


def _build_gpu(seed: int, node: str, pool: PoolSpec, index: int, first_device: int) -> tuple[GpuPlan, list[DevicePlan]]:
    model = pool.model
    uuid = _gpu_uuid(seed, node, index)
    devices: list[DevicePlan] = []
    if pool.sharing is not SharingMode.MIG:
        ge = 1.0 / pool.replicas
        devices.append(
            DevicePlan(first_device, uuid, index, uuid, "gpu", WHOLE_GPU_PROFILE, WHOLE_GPU_PROFILE, None, None,
                       None, None, model.memory_bytes, first_device, pool.replicas, ge)
        )
    else:
        layout = pool.mig_layouts[index % len(pool.mig_layouts)]
        free_ids = {g: list(ids) for g, ids in _GI_IDS.items()}
        used: set[int] = set()
        for gi in layout:
            profile = model.profile(gi.profile)
            candidates = [i for i in free_ids.get(profile.compute_slices, []) if i not in used]
            gi_id = candidates[0] if candidates else max(used | {14}) + 1
            used.add(gi_id)
            gi_first = first_device + len(devices)
            cis: list[int | None] = [None] if gi.compute_instances is None else list(gi.compute_instances)
            for ci_id, (ci_slices, shape) in enumerate(zip(cis, device_shapes(gi), strict=True)):
                devices.append(
                    DevicePlan(
                        first_device + len(devices), "MIG-" + stable_uuid(seed, "mig", uuid, gi_id, ci_id), index, uuid,
                        "mig", profile.name, shape, gi_id, ci_id, profile.compute_slices, ci_slices,
                        profile.memory_bytes, gi_first, pool.replicas,
                        slices_gpu_equivalents(ci_slices or profile.compute_slices) / pool.replicas,
                    )
                )
    gpu = GpuPlan(index, uuid, model, pool.sharing, pool.replicas, tuple(d.index for d in devices))
    return gpu, devices


@dataclass
class _NodeBuilder:
    name: str
    pool: PoolSpec
    gpus: list[GpuPlan]
    devices: list[DevicePlan]
    free: dict[int, list[int]]
    """Device index -> free replica numbers."""
    pods: list[PodPlan]
    holdings: list[HoldingPlan]

    def take(self, shape: str, count: int, gpus: list[int] | None = None) -> list[tuple[int, int]] | None:
        """Pick ``count`` distinct devices of ``shape`` with a free slot, first fit (only on ``gpus`` when
        given, in that order); None when short."""
        if gpus is not None:
            chosen = [d for g in gpus for d in self.devices if d.gpu_index == g and d.shape == shape]
            if len(chosen) < count or not all(self.free[d.index] for d in chosen[:count]):
                return None
            picked = [(d.index, self.free[d.index][0]) for d in chosen[:count]]
            for dev, replica in picked:
                self.free[dev].remove(replica)
            return picked
        candidates = [d for d in self.devices if d.shape == shape and self.free[d.index]]
        candidates.sort(key=lambda d: -len(self.free[d.index]))  # stable: least-shared device first
        picked = [(d.index, self.free[d.index][0]) for d in candidates]
        if len(picked) < count:
            return None
        for dev, replica in picked[:count]:
            self.free[dev].remove(replica)
        return picked[:count]


def _pod_base_name(w: WorkloadSpec, ordinal: int, seed: int) -> str:
    """Pod names as their controllers make them (batch pods add their slot at run time)."""
    rs = stable_uuid(seed, "replicaset", w.name).replace("-", "")[:10]
    suffix = stable_uuid(seed, "pod", w.name, ordinal)[:5]
    kind = w.workload_kind
    if kind == "Deployment":
        return f"{w.name}-{rs}-{suffix}"
    if kind == "JobSet":
        return f"{w.name}-worker-0-{ordinal}-{suffix}"
    if kind in ("StatefulSet", "CronJob", "Pod"):
        return f"{w.name}-{ordinal}"
    return f"{w.name}-{ordinal}-{suffix}"


def build_plan(s: Scenario) -> FleetPlan:
    """Lay out every node and place every workload. Raises ``ValueError`` when a workload does not fit."""
    seed = s.seed
    builders: dict[str, _NodeBuilder] = {}
    for pool in s.pools:
        for node in pool.node_names():
            gpus: list[GpuPlan] = []
            devices: list[DevicePlan] = []
            for i in range(pool.gpus_per_node):
                gpu, devs = _build_gpu(seed, node, pool, i, len(devices))
                gpus.append(gpu)
                devices.extend(devs)
            free = {d.index: list(range(d.replicas)) for d in devices}
            builders[node] = _NodeBuilder(node, pool, gpus, devices, free, [], [])
    for w in s.workloads:
        tenant = s.tenant(w.tenant)
        pool = s.pool(w.pool)
        namespace = w.namespace or tenant.namespaces[0].name
        queue: str | None = None
        if w.kueue:
            queue = w.queue or next((q for q, ns in tenant.local_queue_map().items() if ns == namespace), None)
        for ordinal in range(w.pods):
            placed = False
            on_gpus = w.gpu_indices[ordinal % len(w.gpu_indices)] if w.gpu_indices else None
            for node in w.nodes or pool.node_names():
                b = builders[node]
                picked = b.take(w.shape, w.devices_per_pod, on_gpus)
                if picked is None:
                    continue
                pod_index = len(b.pods)
                holding_ids = []
                for dev, replica in picked:
                    d = b.devices[dev]
                    h = HoldingPlan(
                        len(b.holdings), pod_index, dev, replica if d.replicas > 1 else None, d.gpu_equivalents,
                        stable_key(seed, "holding", w.name, ordinal, dev),
                    )
                    b.holdings.append(h)
                    holding_ids.append(h.index)
                b.pods.append(
                    PodPlan(
                        pod_index, w, ordinal, w.tenant, namespace, queue, tenant.queue_name if queue else None,
                        _CONTAINER[w.archetype], _pod_base_name(w, ordinal, seed), node, pool.flavor_name,
                        stable_key(seed, "pod", w.name, ordinal), tuple(holding_ids),
                    )
                )
                placed = True
                break
            if not placed:
                raise ValueError(
                    f"workload {w.name!r}: pod {ordinal + 1} of {w.pods} does not fit: pool {pool.name!r} has no node "
                    f"with {w.devices_per_pod} free {w.shape!r} device(s) left"
                )
    nodes = {
        name: NodePlan(name, b.pool, b.pool.model, tuple(b.gpus), tuple(b.devices), tuple(b.pods), tuple(b.holdings))
        for name, b in builders.items()
    }
    return FleetPlan(s, nodes)
