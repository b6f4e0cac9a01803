"""Device snapshot model: what a node's GPUs, MIG instances, processes and allocations look like at one instant.

Every source (simulator, NVML, kubelet) returns these frozen dataclasses, in base units: bytes, ratios
0..1, watts, joules, hertz, degrees Celsius, seconds since the Unix epoch. A reading the hardware cannot
give is ``None`` (absent), never a fake zero.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from gpulens.core.gpu_topology import GpuTopology
from gpulens.core.hashing import value_hash
from gpulens.core.vocabulary import slices_gpu_equivalents


class SharingMode(StrEnum):
    """How a physical GPU is shared between containers."""

    EXCLUSIVE = "exclusive"
    MIG = "mig"
    TIME_SLICING = "time-slicing"
    MPS = "mps"


WHOLE_GPU_PROFILE = "gpu"
"""Profile label of a device that is a whole physical GPU (MIG devices carry e.g. ``1g.18gb``)."""


@dataclass(frozen=True)
class HealthReadings:
    """Physical readings of one GPU. ``None`` means the device does not report it."""

    temperature_celsius: float | None = None
    power_watts: float | None = None
    energy_joules: float | None = None
    """Monotonic energy counter since driver load."""
    sm_clock_hz: float | None = None
    memory_clock_hz: float | None = None
    throttle_reasons: frozenset[str] = frozenset()
    """Active clock-event reasons, e.g. ``sw_thermal``, ``hw_slowdown``, ``sw_power_cap``."""
    ecc_corrected_total: int | None = None
    ecc_uncorrected_total: int | None = None
    """Aggregate double-bit (uncorrectable) ECC errors."""
    retired_pages_total: int | None = None
    remapped_rows_failure: bool | None = None
    pcie_replay_total: int | None = None
    nvlink_crc_errors_total: int | None = None
    thermal_violation_seconds_total: float | None = None
    xid_counts: Mapping[int, int] = field(default_factory=dict)
    """XID code -> number of events since the source started."""
    xid_last_seen: Mapping[int, float] = field(default_factory=dict)
    """XID code -> Unix time of the last event."""

    def __hash__(self) -> int:  # mappings are not hashable: hash their items, consistent with ==
        return value_hash(self)


@dataclass(frozen=True)
class MigInstance:
    """One MIG device: a compute instance inside a GPU instance. Memory belongs to the GPU instance."""

    uuid: str
    parent_uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    """GPU-instance profile such as ``1g.18gb`` (compute slices ``g`` and memory)."""
    slices: int
    """Compute slices of the GPU instance (the ``g`` in the profile), 1..7."""
    memory_total_bytes: int
    memory_used_bytes: int | None = None
    activity_ratio: float | None = None
    """Graphics-engine activity 0..1 (GPM on Hopper and later); absent where the hardware cannot say."""
    compute_instance_slices: int | None = None
    """Compute slices of this compute instance when the GPU instance is split; ``None`` = whole GI."""

    @property
    def gpu_equivalents(self) -> float:
        """Compute share of the device: g/7 (or the compute instance's own slices)."""
        return slices_gpu_equivalents(self.compute_instance_slices or self.slices)


@dataclass(frozen=True)
class Gpu:
    """One physical GPU and, in MIG mode, its MIG devices."""

    uuid: str
    index: int
    model: str
    """Product name as NVML reports it, e.g. ``NVIDIA H200``."""
    memory_total_bytes: int
    sharing_mode: SharingMode
    up: bool = True
    """False when the GPU is lost (XID 79, GpuIsLost): other readings are then absent."""
    memory_used_bytes: int | None = None
    activity_ratio: float | None = None
    """Whole-GPU activity 0..1; absent in MIG mode unless GPM gives it."""
    mig_instances: tuple[MigInstance, ...] = ()
    replicas: int = 1
    """Advertised replicas under time-slicing or MPS (1 otherwise)."""
    health: HealthReadings = field(default_factory=HealthReadings)
    nvlink_domain: str | None = None
    driver_version: str | None = None
    topology: GpuTopology | None = None
    """NVLink, PCIe, NUMA and fabric placement (``gpulens/core/gpu_topology.py``); None where not read."""


@dataclass(frozen=True)
class AllocatableDevice:
    """A device of a GPU that a container can be given: the whole GPU (``mig`` None) or one MIG instance."""

    uuid: str
    mig: MigInstance | None
    carries_memory: bool
    """True on the device that reports its memory: the whole GPU, or a GPU instance's first compute instance."""

    @property
    def profile(self) -> str:
        return WHOLE_GPU_PROFILE if self.mig is None else self.mig.profile

    @property
    def gpu_equivalents(self) -> float:
        return 1.0 if self.mig is None else self.mig.gpu_equivalents


def allocatable_devices(gpu: Gpu) -> tuple[AllocatableDevice, ...]:
    """The devices of ``gpu`` that can be allocated, decided here once for every reader.

    A GPU in MIG mode offers only its MIG instances, ordered by (GPU instance, compute instance); a
    MIG GPU without instances offers nothing (the whole GPU cannot be allocated while MIG is on).
    Any other GPU offers itself, whole (time-sliced and MPS replicas share that one device).
    """
    if gpu.sharing_mode is not SharingMode.MIG:
        return (AllocatableDevice(gpu.uuid, None, True),)
    seen: set[int] = set()
    devices = []
    for mig in sorted(gpu.mig_instances, key=lambda m: (m.gpu_instance_id, m.compute_instance_id)):
        devices.append(AllocatableDevice(mig.uuid, mig, mig.gpu_instance_id not in seen))
        seen.add(mig.gpu_instance_id)
    return tuple(devices)


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a device (GPU or MIG instance)."""

    pid: int
    device_id: str
    used_memory_bytes: int | None = None
    sm_utilization_ratio: float | None = None
    """Per-process SM utilization (non-MIG GPUs only); absent otherwise."""
    pod_uid: str | None = None


@dataclass(frozen=True)
class Allocation:
    """One container holding one device (or a replica of a shared GPU)."""

    device_id: str
    """The device's id, as the store's ``device_id``: the GPU or MIG UUID; a time-slicing replica ``GPU-x::3`` is stored as ``GPU-x`` with ``replica=3``."""
    namespace: str
    pod: str
    container: str
    tenant: str
    sharing_mode: SharingMode
    gpu_equivalents: float
    """Compute share held: 1 for a whole GPU, g/7 for MIG, 1/replicas for a shared replica."""
    replica: int | None = None
    pod_uid: str | None = None
    workload_kind: str | None = None
    """Top owner kind: Deployment, StatefulSet, Job, JobSet, RayCluster, or ``Pod`` when bare."""
    workload_name: str | None = None
    queue: str | None = None
    """Kueue LocalQueue name when the pod was admitted through Kueue."""


@dataclass(frozen=True)
class DeviceReadings:
    """What a device source saw on one node at one instant."""

    node: str
    timestamp: float
    gpus: tuple[Gpu, ...]
    processes: tuple[GpuProcess, ...] = ()


@dataclass(frozen=True)
class NodeSnapshot:
    """Device readings joined with the allocations that held them: what the exporter serves."""

    node: str
    timestamp: float
    gpus: tuple[Gpu, ...]
    allocations: tuple[Allocation, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    collection_seconds: float = 0.0
    errors: Mapping[str, int] = field(default_factory=dict)
    """Source name -> errors seen in the cycle that produced this snapshot."""

    def __hash__(self) -> int:  # mappings are not hashable: hash their items, consistent with ==
        return value_hash(self)


@dataclass(frozen=True)
class XidEvent:
    """One XID event as the driver reported it, with the MIG instance it names (None: not tied to one)."""

    gpu_uuid: str
    code: int
    at: float
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@runtime_checkable
class XidEventSource(Protocol):
    """A device source that also reports XID events one by one (NVML); the cycle turns them into span events."""

    def drain_xid_events(self) -> list[XidEvent]: ...


class DeviceSource(Protocol):
    """Reads the GPUs of one node. Implemented by the simulator and by NVML."""

    def read_devices(self, now: float) -> DeviceReadings: ...

    def close(self) -> None: ...


class AllocationSource(Protocol):
    """Says which container holds which device on one node (kubelet PodResources, or the simulator)."""

    def read_allocations(self, now: float) -> tuple[Allocation, ...]: ...

    def close(self) -> None: ...


@runtime_checkable
class ErrorCounting(Protocol):
    """A source, or a part of one, that counts failures which do not fail its whole read (a tenant lookup,
    a DRA slice list, an unexpected NVML answer). The collection cycle takes the counts every cycle and adds
    them to ``gpulens_exporter_errors_total{source=<label>}``; a source whose read either works or raises
    does not implement it (the cycle counts the raise)."""

    def take_errors(self) -> Mapping[str, int]:
        """Errors counted since the previous call, by ``source`` label (non-zero counts only); resets them."""
        ...


class ErrorCounter:
    """The counts behind :class:`ErrorCounting`: ``count`` from any thread, ``take_errors`` once per cycle."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def count(self, source: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._counts[source] = self._counts.get(source, 0) + n

    def take_errors(self) -> dict[str, int]:
        with self._lock:
            counts, self._counts = self._counts, {}
        return counts


def merge_errors(*counts: Mapping[str, int]) -> dict[str, int]:
    """Error counts by source label, added up (zero counts dropped)."""
    merged: dict[str, int] = {}
    for part in counts:
        for source, n in part.items():
            if n:
                merged[source] = merged.get(source, 0) + int(n)
    return merged
