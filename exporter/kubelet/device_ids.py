"""Device ids as device plugins write them in PodResources, and how they map to NVML UUIDs.

Shapes (see docs/real-nodes.md): ``GPU-<uuid>``, ``MIG-<uuid>``, time-slicing replicas ``<id>::<n>``,
GKE ``nvidia0`` / ``nvidia0/gi0`` / ``nvidia0/gi0/vgpu0``, old-driver ``MIG-GPU-<uuid>/<gi>/<ci>``,
HAMi's vGPU ids ``<uuid>-<n>`` and plain indexes (``--device-id-strategy=index``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from gpulens.core.device_model import DeviceReadings

GPU_RESOURCES = ("nvidia.com/gpu",)
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

_GKE = re.compile(r"^nvidia(?P<index>\d+)(?:/gi(?P<gi>\d+))?(?:/vgpu(?P<vgpu>\d+))?$")
_OLD_MIG = re.compile(r"^MIG-(?P<parent>GPU-[0-9a-fA-F-]+)/(?P<gi>\d+)/(?P<ci>\d+)$")


def is_gpu_resource(resource_name: str, extra: tuple[str, ...] = ()) -> bool:
    """True for ``nvidia.com/gpu``, ``nvidia.com/gpu.shared``, ``nvidia.com/mig-*`` and configured names."""
    return (
        resource_name in GPU_RESOURCES
        or resource_name in extra
        or resource_name.startswith(MIG_RESOURCE_PREFIX)
        or resource_name.startswith("nvidia.com/gpu.")
    )


@dataclass(frozen=True)
class DeviceRef:
    """A parsed device id: exactly one of ``uuid``, ``index`` (GKE / index strategy) or ``old_mig``."""

    raw: str
    uuid: str | None = None
    index: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    parent_uuid: str | None = None
    replica: int | None = None


def parse_device_id(raw: str) -> DeviceRef:
    """Parse one ``device_ids`` entry; unknown shapes come back with ``uuid=raw`` (kept, never dropped)."""
    base, sep, rest = raw.partition("::")
    replica = int(rest) if sep and rest.isdigit() else None
    gke = _GKE.match(base)
    if gke:
        vgpu = gke.group("vgpu")
        return DeviceRef(
            raw=raw,
            index=int(gke.group("index")),
            gpu_instance_id=int(gke.group("gi")) if gke.group("gi") is not None else None,
            replica=int(vgpu) if vgpu is not None else replica,
        )
    old = _OLD_MIG.match(base)
    if old:
        return DeviceRef(
            raw=raw,
            parent_uuid=old.group("parent"),
            gpu_instance_id=int(old.group("gi")),
            compute_instance_id=int(old.group("ci")),
            replica=replica,
        )
    if base.isdigit():
        return DeviceRef(raw=raw, index=int(base), replica=replica)
    return DeviceRef(raw=raw, uuid=base, replica=replica)


def shared_base(raw: str) -> str:
    """The id of the physical device behind a shared replica: ``GPU-x::3`` -> ``GPU-x``,
    ``nvidia0/gi0/vgpu2`` -> ``nvidia0/gi0``; other ids unchanged."""
    base = raw.partition("::")[0]
    head, sep, tail = base.rpartition("/vgpu")
    return head if sep and tail.isdigit() else base


@dataclass(frozen=True)
class DeviceInfo:
    """What the allocation side needs to know about one allocatable device."""

    uuid: str
    parent_uuid: str
    gpu_equivalents: float
    profile: str
    memory_total_bytes: int | None = None


@dataclass(frozen=True)
class DeviceDirectory:
    """UUIDs, indexes and GPU-instance ids of the devices one node's source saw, for id resolution."""

    by_uuid: Mapping[str, DeviceInfo] = field(default_factory=dict)
    gpu_by_index: Mapping[int, str] = field(default_factory=dict)
    mig_by_index_gi: Mapping[tuple[int, int], str] = field(default_factory=dict)
    mig_by_parent_gi_ci: Mapping[tuple[str, int, int], str] = field(default_factory=dict)

    @classmethod
    def from_readings(cls, readings: DeviceReadings) -> DeviceDirectory:
        by_uuid: dict[str, DeviceInfo] = {}
        gpu_by_index: dict[int, str] = {}
        by_index_gi: dict[tuple[int, int], str] = {}
        by_parent: dict[tuple[str, int, int], str] = {}
        for gpu in readings.gpus:
            gpu_by_index[gpu.index] = gpu.uuid
            by_uuid[gpu.uuid] = DeviceInfo(gpu.uuid, gpu.uuid, 1.0, "gpu", gpu.memory_total_bytes)
            for mig in gpu.mig_instances:
                by_uuid[mig.uuid] = DeviceInfo(mig.uuid, gpu.uuid, mig.gpu_equivalents, mig.profile,
                                               mig.memory_total_bytes)
                by_index_gi.setdefault((gpu.index, mig.gpu_instance_id), mig.uuid)
                by_parent[(gpu.uuid, mig.gpu_instance_id, mig.compute_instance_id)] = mig.uuid
        return cls(by_uuid, gpu_by_index, by_index_gi, by_parent)

    def resolve(self, ref: DeviceRef) -> str | None:
        """The GPU or MIG UUID a parsed id stands for (``None`` when this node has no such device)."""
        if ref.uuid is not None:
            base, _, split = ref.uuid.rpartition("-")
            if ref.uuid not in self.by_uuid and split.isdigit() and base in self.by_uuid:
                return base  # HAMi's vGPU ids: <uuid>-<n>, one per split of the GPU
            return ref.uuid
        if ref.parent_uuid is not None and ref.gpu_instance_id is not None:
            return self.mig_by_parent_gi_ci.get((ref.parent_uuid, ref.gpu_instance_id, ref.compute_instance_id or 0))
        if ref.index is not None:
            if ref.gpu_instance_id is not None:
                return self.mig_by_index_gi.get((ref.index, ref.gpu_instance_id))
            return self.gpu_by_index.get(ref.index)
        return None
