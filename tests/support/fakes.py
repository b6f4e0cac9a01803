"""Fakes at our own boundaries (device and allocation sources) and hand-built node snapshots.

``every_family_readings()`` exercises every metric family: a MIG H200 (two compute instances sharing a
GPU instance, GPM activity), an A100 in MIG mode (no activity), an exclusive H100, a time-sliced H100
with per-process attribution, a lost GPU, XIDs, ECC errors and thermal throttling.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from gpulens.core.device_model import (
    Allocation,
    DeviceReadings,
    Gpu,
    GpuProcess,
    HealthReadings,
    MigInstance,
    SharingMode,
)

GIB = 1024**3
MIB = 1024**2
NODE = "node-a"


class FakeDeviceSource:
    """Returns ``readings`` (or what ``make(now)`` builds); counts reads; can be told to fail."""

    def __init__(self, readings: DeviceReadings | Callable[[float], DeviceReadings]) -> None:
        self._make = readings if callable(readings) else (lambda _now: readings)
        self.reads = 0
        self.fail_with: Exception | None = None
        self.closed = False
        self._lock = threading.Lock()

    def read_devices(self, now: float) -> DeviceReadings:
        with self._lock:
            self.reads += 1
        if self.fail_with is not None:
            raise self.fail_with
        return self._make(now)

    def close(self) -> None:
        self.closed = True


class FakeAllocationSource:
    """Plays the kubelet: returns ``allocations`` (mutable), or raises ``fail_with``."""

    def __init__(self, allocations: tuple[Allocation, ...] = ()) -> None:
        self.allocations = allocations
        self.fail_with: Exception | None = None
        self.reads = 0
        self.closed = False

    def read_allocations(self, now: float) -> tuple[Allocation, ...]:
        self.reads += 1
        if self.fail_with is not None:
            raise self.fail_with
        return self.allocations

    def close(self) -> None:
        self.closed = True


class FakeClock:
    """A settable clock: ``clock()`` returns ``now``; ``advance(seconds)`` moves it."""

    def __init__(self, now: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _health(**kwargs: object) -> HealthReadings:
    base: dict[str, object] = dict(
        temperature_celsius=41.0, power_watts=312.5, energy_joules=123456789.0, sm_clock_hz=1.98e9,
        memory_clock_hz=2.619e9, ecc_corrected_total=0, ecc_uncorrected_total=0, remapped_rows_failure=False,
        pcie_replay_total=0, nvlink_crc_errors_total=0, thermal_violation_seconds_total=0.0,
    )
    base.update(kwargs)
    return HealthReadings(**base)  # type: ignore[arg-type]


def h200_mig_gpu() -> Gpu:
    """An H200 in MIG mode: a 3g.71gb, a 2g.35gb split into two compute instances, a 1g.18gb."""
    parent = "GPU-11111111-1111-1111-1111-111111111111"
    migs = (
        MigInstance("MIG-aaaaaaaa-0000-0000-0000-000000000001", parent, 2, 0, "3g.71gb", 3, 71 * GIB,
                    memory_used_bytes=40 * GIB, activity_ratio=0.75),
        MigInstance("MIG-aaaaaaaa-0000-0000-0000-000000000002", parent, 5, 0, "2g.35gb", 2, 35 * GIB,
                    memory_used_bytes=10 * GIB, activity_ratio=0.5, compute_instance_slices=1),
        MigInstance("MIG-aaaaaaaa-0000-0000-0000-000000000003", parent, 5, 1, "2g.35gb", 2, 35 * GIB,
                    memory_used_bytes=10 * GIB, activity_ratio=0.25, compute_instance_slices=1),
        MigInstance("MIG-aaaaaaaa-0000-0000-0000-000000000004", parent, 9, 0, "1g.18gb", 1, 18 * GIB,
                    memory_used_bytes=0, activity_ratio=0.0),
    )
    return Gpu(parent, 0, "NVIDIA H200", 141 * GIB, SharingMode.MIG, mig_instances=migs,
               health=_health(throttle_reasons=frozenset({"sw_thermal"}), thermal_violation_seconds_total=12.5,
                              xid_counts={13: 2}, xid_last_seen={13: 1_767_225_000.0}),
               driver_version="590.48.01")


def a100_mig_gpu() -> Gpu:
    """An A100 in MIG mode: no GPM, so MIG activity is absent."""
    parent = "GPU-22222222-2222-2222-2222-222222222222"
    migs = (
        MigInstance("MIG-bbbbbbbb-0000-0000-0000-000000000001", parent, 1, 0, "4g.40gb", 4, 40 * GIB,
                    memory_used_bytes=30 * GIB),
        MigInstance("MIG-bbbbbbbb-0000-0000-0000-000000000002", parent, 2, 0, "3g.40gb", 3, 40 * GIB,
                    memory_used_bytes=1 * GIB),
    )
    return Gpu(parent, 1, "NVIDIA A100-SXM4-80GB", 80 * GIB, SharingMode.MIG, mig_instances=migs,
               health=_health(retired_pages_total=2, ecc_corrected_total=7, ecc_uncorrected_total=1,
                              xid_counts={48: 1}, xid_last_seen={48: 1_767_225_300.0}),
               driver_version="590.48.01")


def h100_exclusive_gpu() -> Gpu:
    return Gpu("GPU-33333333-3333-3333-3333-333333333333", 2, "NVIDIA H100 80GB HBM3", 80 * GIB,
               SharingMode.EXCLUSIVE, memory_used_bytes=70 * GIB, activity_ratio=0.9,
               health=_health(throttle_reasons=frozenset({"sw_power_cap"})), driver_version="590.48.01")


def h100_time_sliced_gpu() -> Gpu:
    return Gpu("GPU-44444444-4444-4444-4444-444444444444", 3, "NVIDIA H100 80GB HBM3", 80 * GIB,
               SharingMode.TIME_SLICING, memory_used_bytes=20 * GIB, activity_ratio=0.6, replicas=4,
               health=_health(), driver_version="590.48.01")


def lost_gpu() -> Gpu:
    """XID 79: the GPU fell off the bus; only identity, up=0 and the XID counter remain."""
    return Gpu("GPU-55555555-5555-5555-5555-555555555555", 4, "NVIDIA H100 80GB HBM3", 80 * GIB,
               SharingMode.EXCLUSIVE, up=False,
               health=HealthReadings(xid_counts={79: 1}, xid_last_seen={79: 1_767_225_500.0}),
               driver_version="590.48.01")


def with_topology(gpu: Gpu, peer: Gpu) -> Gpu:
    """``gpu`` with every topology reading: NUMA, NVLink links, a peer, and a completed fabric registration."""
    from dataclasses import replace

    from gpulens.core.gpu_topology import FabricInfo, GpuTopology, PeerLink

    topology = GpuTopology(
        numa_node=1, cpu_affinity="56-111,168-223", nvlink_active=18, nvlink_inactive=0,
        peers=(PeerLink(peer.index, peer.uuid, "system", "ok"),),
        fabric=FabricInfo("c0ffee00-0000-4000-8000-000000000001", 7, "completed", 0),
    )
    return replace(gpu, topology=topology, nvlink_domain=topology.fabric.domain if topology.fabric else None)


def every_family_readings(now: float = 1_767_225_600.0, node: str = NODE) -> DeviceReadings:
    gpus = (h200_mig_gpu(), a100_mig_gpu(), with_topology(h100_exclusive_gpu(), h100_time_sliced_gpu()),
            h100_time_sliced_gpu(), lost_gpu())
    processes = (
        GpuProcess(4101, "GPU-44444444-4444-4444-4444-444444444444", 12 * GIB, 0.45, pod_uid="uid-ts-a"),
        GpuProcess(4102, "GPU-44444444-4444-4444-4444-444444444444", 8 * GIB, 0.15, pod_uid="uid-ts-b"),
    )
    return DeviceReadings(node=node, timestamp=now, gpus=gpus, processes=processes)


def _alloc(device: str, ns: str, pod: str, tenant: str, mode: SharingMode, ge: float, **kw: object) -> Allocation:
    return Allocation(device, ns, pod, "main", tenant, mode, ge, **kw)  # type: ignore[arg-type]


def every_family_allocations() -> tuple[Allocation, ...]:
    """Allocations over the devices of ``every_family_readings``; one pod name holds hostile characters."""
    return (
        _alloc("MIG-aaaaaaaa-0000-0000-0000-000000000001", "team-a", "train-0", "team-a", SharingMode.MIG, 3 / 7,
               workload_kind="Job", workload_name="train", queue="team-a-q"),
        _alloc("MIG-aaaaaaaa-0000-0000-0000-000000000002", "team-b", "serve-0", "team-b", SharingMode.MIG, 1 / 7,
               workload_kind="Deployment", workload_name="serve"),
        _alloc("MIG-aaaaaaaa-0000-0000-0000-000000000003", "team-b", "serve-1", "team-b", SharingMode.MIG, 1 / 7,
               workload_kind="Deployment", workload_name="serve"),
        _alloc("MIG-bbbbbbbb-0000-0000-0000-000000000001", "team-a", 'nb-"x"\n</script>', "team-a",
               SharingMode.MIG, 4 / 7, workload_kind="Pod"),
        _alloc("GPU-33333333-3333-3333-3333-333333333333", "team-c", "train-big-0", "team-c",
               SharingMode.EXCLUSIVE, 1.0, workload_kind="JobSet", workload_name="train-big"),
        _alloc("GPU-44444444-4444-4444-4444-444444444444", "team-a", "eval-0", "team-a", SharingMode.TIME_SLICING,
               0.25, replica=0, pod_uid="uid-ts-a", workload_kind="Job", workload_name="eval"),
        _alloc("GPU-44444444-4444-4444-4444-444444444444", "team-c", "eval-1", "team-c", SharingMode.TIME_SLICING,
               0.25, replica=1, pod_uid="uid-ts-b", workload_kind="Job", workload_name="eval"),
        _alloc("GPU-44444444-4444-4444-4444-444444444444", "team-c", "eval-2", "team-c", SharingMode.TIME_SLICING,
               0.25, replica=2, workload_kind="Job", workload_name="eval"),
    )
