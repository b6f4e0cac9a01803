"""FakeNvml: an NVML module object with pynvml's function names, replaying devices built from captures.

It raises real ``pynvml.NVMLError`` subclasses (``NotSupported`` for what the capture shows as N/A,
``GpuIsLost`` for a lost GPU, ``FunctionNotFound`` for functions an "old driver" lacks, ``NotFound`` for
empty MIG slots) and keeps a virtual clock so GPM samples and events are deterministic.
"""

from __future__ import annotations

import ctypes
import itertools
import time
from collections import deque
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import pynvml

MIB = 1024 * 1024


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass
class FakeProcess:
    pid: int
    used_mib: int | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    sm_percent: int = 0


@dataclass
class FakeMig:
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    label: str
    """Profile as ``nvidia-smi -L`` prints it: ``3g.40gb`` or ``1c.3g.71gb`` for a split GI."""
    memory_total_mib: int
    memory_used_mib: int
    activity: float = 0.0

    @property
    def gi_slices(self) -> int:
        return int(self.label.split(".")[-2].rstrip("g"))

    @property
    def ci_slices(self) -> int:
        parts = self.label.split(".")
        return int(parts[0].rstrip("c")) if len(parts) == 3 else self.gi_slices


@dataclass
class FakeGpu:
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int
    utilization_percent: int | None
    temperature_c: int
    power_mw: int
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    clock_event_reasons: int = 0
    ecc_corrected: int | None = 0
    ecc_uncorrected: int | None = 0
    retired_pages: int | None = None
    remapped_rows_failure: bool | None = None
    pcie_replay: int | None = 0
    mig_enabled: bool = False
    migs: list[FakeMig] = field(default_factory=list)
    processes: list[FakeProcess] = field(default_factory=list)
    gpm_supported: bool = True
    activity: float = 0.0
    lost: bool = False
    energy_mj: int = 0
    numa_node: int | None = None
    """NUMA node (nvmlDeviceGetMemoryAffinity); None: NOT_SUPPORTED."""
    cpus: list[int] | None = None
    """CPUs close to the GPU (nvmlDeviceGetCpuAffinity); None: NOT_SUPPORTED."""
    nvlink_states: list[int] | None = None
    """nvmlDeviceGetNvLinkState per link (1 up, 0 down); None: a GPU without NVLink (NOT_SUPPORTED)."""
    ancestors: dict[str, int] = field(default_factory=dict)
    """Peer GPU UUID -> nvmlGpuTopologyLevel_t; a missing peer answers NOT_SUPPORTED."""
    p2p_nvlink: dict[str, int] = field(default_factory=dict)
    """Peer GPU UUID -> nvmlGpuP2PStatus_t over NVLink (missing: NVML_P2P_STATUS_NOT_SUPPORTED)."""
    fabric: tuple[bytes, int, int, int] | None = None
    """(clusterUuid 16 bytes, cliqueId, state, status) of nvmlGpuFabricInfo_v2_t; None: NOT_SUPPORTED."""

    def renamed(self, uuid: str) -> FakeGpu:
        """A copy with another GPU UUID; MIG UUIDs get the GPU's suffix so they stay unique."""
        tail = uuid[-8:]
        migs = [replace(m, uuid=f"{m.uuid[:-8]}{tail}") for m in self.migs]
        return replace(self, uuid=uuid, migs=migs, processes=list(self.processes))


@dataclass(frozen=True)
class _Handle:
    gpu_uuid: str
    mig_uuid: str | None = None


@dataclass
class _GpmSample:
    key: tuple[str, int | None, str]
    busy: float = 0.0
    at: float = 0.0


class _GpmMetric:
    def __init__(self) -> None:
        self.metricId = 0
        self.nvmlReturn = 0
        self.value = 0.0


class FakeGpmMetricsGet:
    """Stands in for ``pynvml.c_nvmlGpmMetricsGet_t``."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [_GpmMetric() for _ in range(8)]


def _masks(bits: list[int], words: int) -> list[int]:
    """NVML's affinity answer: ``words`` 64-bit words with the given bit numbers set."""
    out = [0] * words
    for b in bits:
        out[b // 64] |= 1 << (b % 64)
    return out


class FakeNvml:
    """A fake ``pynvml`` module: same function names, same exceptions, devices from captures."""

    NVMLError = pynvml.NVMLError
    c_nvmlGpmMetricsGet_t = FakeGpmMetricsGet
    c_nvmlGpuFabricInfoV_t = pynvml.c_nvmlGpuFabricInfoV_t  # the real v2 struct layout

    def __init__(self, gpus: list[FakeGpu], *, driver_version: str = "590.48.01",
                 missing: frozenset[str] | set[str] = frozenset()) -> None:
        self.gpus = gpus
        self.driver_version = driver_version
        self.missing = set(missing)
        self.now = 1_000.0
        self.calls: list[tuple[str, Any]] = []
        self.init_calls = 0
        self.shutdown_calls = 0
        self.driver_loaded = True
        self.samples_alive = 0
        self._busy: dict[tuple[str, int | None], float] = {}
        self._event_sets: dict[int, tuple[set[str], deque[Any]]] = {}
        self._set_ids = itertools.count(1)

    # -- test controls --------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move the virtual clock; GPM busy counters and energy grow with each device's activity."""
        self.now += seconds
        for gpu in self.gpus:
            gpu.energy_mj += int(gpu.power_mw * seconds)
            key: tuple[str, int | None] = (gpu.uuid, None)
            self._busy[key] = self._busy.get(key, 0.0) + gpu.activity * seconds
            for gi in {m.gpu_instance_id for m in gpu.migs}:
                acts = [m.activity for m in gpu.migs if m.gpu_instance_id == gi]
                self._busy[(gpu.uuid, gi)] = self._busy.get((gpu.uuid, gi), 0.0) + max(acts) * seconds

    def emit_xid(self, gpu_uuid: str, code: int, gpu_instance_id: int | None = None) -> None:
        for registered, queue in self._event_sets.values():
            if gpu_uuid in registered:
                queue.append(SimpleNamespace(
                    device=_Handle(gpu_uuid), eventType=pynvml.nvmlEventTypeXidCriticalError, eventData=code,
                    gpuInstanceId=0xFFFFFFFF if gpu_instance_id is None else gpu_instance_id,
                    computeInstanceId=0xFFFFFFFF))

    def count_calls(self, function: str) -> int:
        return sum(1 for name, _ in self.calls if name == function)

    def gpu(self, uuid: str) -> FakeGpu:
        return next(g for g in self.gpus if g.uuid == uuid)

    # -- plumbing -------------------------------------------------------------------------------------

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name[4:5].isupper():
            if name in object.__getattribute__(self, "missing"):
                def missing(*_args: Any) -> Any:
                    raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
                return missing
            fn = object.__getattribute__(self, name)
            calls = object.__getattribute__(self, "calls")

            def recorded(*args: Any) -> Any:
                calls.append((name, args))
                return fn(*args)
            return recorded
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:  # constants: NVML_*, nvmlEventType*, ...
        if name.startswith("NVML_") or name.startswith("nvmlEventType") or name.startswith("nvmlClocks"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _gpu_of(self, handle: _Handle) -> FakeGpu:
        if not self.driver_loaded:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
        gpu = self.gpu(handle.gpu_uuid)
        if gpu.lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def _mig_of(self, handle: _Handle) -> tuple[FakeGpu, FakeMig]:
        gpu = self._gpu_of(handle)
        for mig in gpu.migs:
            if mig.uuid == handle.mig_uuid:
                return gpu, mig
        raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # stale handle after reconfiguration

    # -- init, system, enumeration --------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if not self.driver_loaded:
            raise nvml_error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        self.init_calls += 1

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    # -- topology -------------------------------------------------------------------------------------

    def nvmlDeviceGetMemoryAffinity(self, handle: _Handle, node_set_size: int, scope: int) -> list[int]:
        gpu = self._gpu_of(handle)
        if gpu.numa_node is None or scope != pynvml.NVML_AFFINITY_SCOPE_NODE:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return _masks([gpu.numa_node], node_set_size)

    def nvmlDeviceGetCpuAffinity(self, handle: _Handle, cpu_set_size: int) -> list[int]:
        gpu = self._gpu_of(handle)
        if gpu.cpus is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return _masks(gpu.cpus, cpu_set_size)

    def nvmlDeviceGetNvLinkState(self, handle: _Handle, link: int) -> int:
        gpu = self._gpu_of(handle)
        if gpu.nvlink_states is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if link >= len(gpu.nvlink_states):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.nvlink_states[link]

    def nvmlDeviceGetTopologyCommonAncestor(self, handle: _Handle, peer: _Handle) -> int:
        gpu = self._gpu_of(handle)
        self._gpu_of(peer)
        if peer.gpu_uuid not in gpu.ancestors:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.ancestors[peer.gpu_uuid]

    def nvmlDeviceGetP2PStatus(self, handle: _Handle, peer: _Handle, index: int) -> int:
        if not isinstance(index, int):  # pynvml's NVML_P2P_CAPS_INDEX_READ is the tuple (0,): ctypes refuses it
            raise ctypes.ArgumentError("argument 3: wrong type")
        gpu = self._gpu_of(handle)
        self._gpu_of(peer)
        if index != pynvml.NVML_P2P_CAPS_INDEX_NVLINK:
            return pynvml.NVML_P2P_STATUS_OK
        return gpu.p2p_nvlink.get(peer.gpu_uuid, pynvml.NVML_P2P_STATUS_NOT_SUPPORTED)

    def nvmlDeviceGetGpuFabricInfoV(self, handle: _Handle, info_ref: Any) -> int:
        gpu = self._gpu_of(handle)
        if gpu.fabric is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = info_ref._obj  # ctypes.byref(struct), as pynvml hands it to the C function
        if info.version != pynvml.nvmlGpuFabricInfo_v2:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        cluster, clique, state, status = gpu.fabric
        info.clusterUuid[:] = list(cluster)
        info.cliqueId, info.state, info.status = clique, state, status
        return pynvml.NVML_SUCCESS

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        handle = _Handle(self.gpus[index].uuid)
        self._gpu_of(handle)
        return handle

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> _Handle:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return _Handle(self._gpu_of(_Handle(uuid)).uuid)
            for mig in gpu.migs:
                if mig.uuid == uuid:
                    return _Handle(gpu.uuid, uuid)
        raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        self._gpu_of(handle)
        return handle.mig_uuid or handle.gpu_uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        if handle.mig_uuid:
            gpu, mig = self._mig_of(handle)
            return f"{gpu.name} MIG {mig.label}"
        return self._gpu_of(handle).name

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        gpu = self._gpu_of(handle)
        return [int(gpu.mig_enabled), int(gpu.mig_enabled)]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        return 7 if self._gpu_of(handle).mig_enabled else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        gpu = self._gpu_of(handle)
        if index >= len(gpu.migs):
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return _Handle(gpu.uuid, gpu.migs[index].uuid)

    def nvmlDeviceGetGpuInstanceId(self, handle: _Handle) -> int:
        return self._mig_of(handle)[1].gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: _Handle) -> int:
        return self._mig_of(handle)[1].compute_instance_id

    def nvmlDeviceGetAttributes_v2(self, handle: _Handle) -> Any:
        if not handle.mig_uuid:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        _, mig = self._mig_of(handle)
        return SimpleNamespace(gpuInstanceSliceCount=mig.gi_slices, computeInstanceSliceCount=mig.ci_slices,
                               memorySizeMB=mig.memory_total_mib)

    # -- readings ---------------------------------------------------------------------------------------

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: Any = None) -> Any:
        if handle.mig_uuid:
            _, mig = self._mig_of(handle)
            total, used = mig.memory_total_mib, mig.memory_used_mib
        else:
            gpu = self._gpu_of(handle)
            total, used = gpu.memory_total_mib, gpu.memory_used_mib
        return SimpleNamespace(total=total * MIB, used=used * MIB, free=(total - used) * MIB)

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        gpu = self._gpu_of(handle)
        if handle.mig_uuid or gpu.mig_enabled or gpu.utilization_percent is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=gpu.utilization_percent, memory=0)

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        return self._gpu_of(handle).temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._gpu_of(handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        return self._gpu_of(handle).energy_mj

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> int:
        gpu = self._gpu_of(handle)
        value = gpu.sm_clock_mhz if clock == pynvml.NVML_CLOCK_SM else gpu.memory_clock_mhz
        if value is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        return self._gpu_of(handle).clock_event_reasons

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter: int) -> int:
        gpu = self._gpu_of(handle)
        value = gpu.ecc_corrected if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else gpu.ecc_uncorrected
        if value is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetRetiredPages(self, handle: _Handle, cause: int) -> list[int]:
        gpu = self._gpu_of(handle)
        if gpu.retired_pages is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return list(range(gpu.retired_pages)) if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR else []

    def nvmlDeviceGetRemappedRows(self, handle: _Handle) -> tuple[int, int, int, int]:
        gpu = self._gpu_of(handle)
        if gpu.remapped_rows_failure is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return (0, 0, 0, int(gpu.remapped_rows_failure))

    def nvmlDeviceGetPcieReplayCounter(self, handle: _Handle) -> int:
        gpu = self._gpu_of(handle)
        if gpu.pcie_replay is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.pcie_replay

    def nvmlDeviceGetFieldValues(self, handle: _Handle, field_ids: list[Any]) -> list[Any]:
        self._gpu_of(handle)
        return [SimpleNamespace(nvmlReturn=pynvml.NVML_ERROR_NOT_SUPPORTED, value=SimpleNamespace(ullVal=0))
                for _ in field_ids]

    def nvmlDeviceGetViolationStatus(self, handle: _Handle, policy: int) -> Any:
        self._gpu_of(handle)
        return SimpleNamespace(referenceTime=0, violationTime=2_500_000_000)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[Any]:
        if handle.mig_uuid:
            gpu, mig = self._mig_of(handle)
            procs = [p for p in gpu.processes
                     if p.gpu_instance_id == mig.gpu_instance_id and p.compute_instance_id == mig.compute_instance_id]
        else:
            gpu = self._gpu_of(handle)
            procs = [] if gpu.mig_enabled else list(gpu.processes)
        return [SimpleNamespace(pid=p.pid, usedGpuMemory=None if p.used_mib is None else p.used_mib * MIB,
                                gpuInstanceId=p.gpu_instance_id, computeInstanceId=p.compute_instance_id)
                for p in procs]

    def nvmlDeviceGetProcessUtilization(self, handle: _Handle, last_seen_us: int) -> list[Any]:
        gpu = self._gpu_of(handle)
        if handle.mig_uuid or gpu.mig_enabled:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not gpu.processes:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        ts = int(self.now * 1e6)
        return [SimpleNamespace(pid=p.pid, timeStamp=ts, smUtil=p.sm_percent, memUtil=0) for p in gpu.processes]

    # -- GPM ---------------------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, handle: _Handle) -> Any:
        return SimpleNamespace(version=1, isSupportedDevice=int(self._gpu_of(handle).gpm_supported))

    def nvmlGpmSampleAlloc(self) -> _GpmSample:
        self.samples_alive += 1
        return _GpmSample(key=("", None, ""))

    def nvmlGpmSampleFree(self, sample: _GpmSample) -> None:
        self.samples_alive -= 1

    def nvmlGpmSampleGet(self, handle: _Handle, sample: _GpmSample) -> _GpmSample:
        gpu = self._gpu_of(handle)
        if not gpu.gpm_supported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        sample.key, sample.busy, sample.at = (gpu.uuid, None, ""), self._busy.get((gpu.uuid, None), 0.0), self.now
        return sample

    def nvmlGpmMigSampleGet(self, handle: _Handle, gpu_instance_id: int, sample: _GpmSample) -> _GpmSample:
        gpu = self._gpu_of(handle)
        members = [m for m in gpu.migs if m.gpu_instance_id == gpu_instance_id]
        if not gpu.gpm_supported or not members:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED if members else pynvml.NVML_ERROR_NOT_FOUND)
        generation = ",".join(sorted(m.uuid for m in members))
        sample.key = (gpu.uuid, gpu_instance_id, generation)
        sample.busy, sample.at = self._busy.get((gpu.uuid, gpu_instance_id), 0.0), self.now
        return sample

    def nvmlGpmMetricsGet(self, request: FakeGpmMetricsGet) -> FakeGpmMetricsGet:
        first, second = request.sample1, request.sample2
        for metric in request.metrics[: request.numMetrics]:
            if first.key != second.key or second.at <= first.at:
                metric.nvmlReturn, metric.value = pynvml.NVML_ERROR_INVALID_ARGUMENT, 0.0
            else:
                metric.nvmlReturn = 0
                metric.value = 100.0 * (second.busy - first.busy) / (second.at - first.at)
        return request

    # -- events ------------------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> int:
        set_id = next(self._set_ids)
        self._event_sets[set_id] = (set(), deque())
        return set_id

    def nvmlDeviceRegisterEvents(self, handle: _Handle, event_types: int, event_set: int) -> None:
        self._gpu_of(handle)
        self._event_sets[event_set][0].add(handle.gpu_uuid)

    def nvmlEventSetWait(self, event_set: int, timeout_ms: int) -> Any:
        queue = self._event_sets[event_set][1]
        if not queue:
            time.sleep(min(timeout_ms, 20) / 1000.0)
            if not queue:
                raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
        return queue.popleft()

    def nvmlEventSetFree(self, event_set: int) -> None:
        self._event_sets.pop(event_set, None)
