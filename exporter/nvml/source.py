"""The NVML device source: reads every GPU and MIG instance of the node through the query funnel.

GPUs are identified by UUID (indexes change across reboots). MIG instances are re-enumerated every cycle
because their handles go stale when instances are reconfigured. A GPU that stops answering (``GpuIsLost``
and the other lifecycle errors) is reported ``up=False`` and retried with exponential backoff while the
other GPUs keep reporting; a driver-wide failure re-initialises NVML with backoff. NVML is initialised
once and never shut down between cycles.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from exporter.attribution import PidPodResolver
from exporter.kubelet.device_ids import DeviceDirectory
from exporter.nvml.funnel import ErrorClass, GpuLifecycleError, NvmlFunnel
from exporter.nvml.gpm import GpmSampler
from exporter.nvml.topology import read_topology
from exporter.nvml.xid import XidEvent, XidWatcher
from gpulens.core.device_model import (
    DeviceReadings,
    Gpu,
    GpuProcess,
    HealthReadings,
    MigInstance,
    SharingMode,
)
from gpulens.core.gpu_topology import GpuTopology, nvlink_domains
from gpulens.core.mig_catalog import profile_slices
from gpulens.core.vocabulary import NVML_THROTTLE_BITS

log = logging.getLogger(__name__)

MIB = 1024 * 1024
NVML_SOURCE = "nvml"
"""``source`` label of NVML answers that are neither a value, "absent", benign nor a lost GPU."""

THROTTLE_REASONS: tuple[tuple[int, str], ...] = tuple((bit, str(reason)) for bit, reason in NVML_THROTTLE_BITS)


@dataclass
class _GpuState:
    uuid: str
    index: int
    handle: Any
    model: str
    memory_total_bytes: int
    gpm: bool = False
    absent: set[str] = field(default_factory=set)
    down: bool = False
    retry_at: float = 0.0
    backoff: float = 0.0
    last_error: str | None = None
    process_ts_us: int = 0
    mig_uuids: set[str] = field(default_factory=set)
    mig_slots: int = 0
    """MIG device slots of the GPU (a hardware constant once MIG mode answers with a positive count)."""


@dataclass(frozen=True)
class _MigIdentity:
    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    """GPU-instance profile, e.g. ``3g.71gb``."""
    gi_slices: int
    ci_slices: int
    memory_bytes: int


class NvmlDeviceSource:
    """A :class:`gpulens.core.device_model.DeviceSource` on NVML (``pynvml`` or a fake with the same names)."""

    def __init__(
        self,
        nvml: Any,
        node: str,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        backoff_initial: float = 1.0,
        backoff_max: float = 60.0,
        watch_xids: bool = True,
        xid_wait_ms: int = 1000,
        attribute_processes: bool = False,
        proc_root: Path = Path("/proc"),
        funnel: NvmlFunnel | None = None,
    ) -> None:
        self.node = node
        self.funnel = funnel or NvmlFunnel(nvml)
        self.nvml = nvml
        self._monotonic = monotonic
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._pids = PidPodResolver(proc_root) if attribute_processes else None
        nvml.nvmlInit()  # errors here are the caller's: NVML cannot load at all
        self.driver_version = _text(self.funnel.call("nvmlSystemGetDriverVersion"))
        self.gpm = GpmSampler(self.funnel)
        self._gpus: dict[str, _GpuState] = {}
        self._mig_static: dict[str, _MigIdentity] = {}
        self._driver_down = False
        self._driver_retry_at = 0.0
        self._driver_backoff = backoff_initial
        self.xids = XidWatcher(self.funnel, self.live_handles, wait_ms=xid_wait_ms)
        self._discover()
        self._topology: dict[str, tuple[GpuTopology, str | None]] = self._read_topology()
        self.directory = DeviceDirectory()
        self.replicas: Callable[[], Mapping[str, int]] = dict
        """GPU UUID -> advertised replicas (time-slicing / MPS), from the allocation side when wired."""
        self._unexpected_taken = self.funnel.errors_of(ErrorClass.OTHER)
        """Discovery's answers are not counted: a binding probing a newer struct version is expected there."""
        if watch_xids:
            self.xids.start()

    # -- DeviceSource -------------------------------------------------------------------------------

    def read_devices(self, now: float) -> DeviceReadings:
        if self._driver_down and self._monotonic() >= self._driver_retry_at:
            self._reinitialise()
        gpus: list[Gpu] = []
        processes: list[GpuProcess] = []
        for state in sorted(self._gpus.values(), key=lambda s: s.index):
            if self._driver_down or (state.down and not self._try_recover(state)):
                gpus.append(self._down_gpu(state))
                continue
            try:
                gpu, procs = self._read_gpu(state, now)
            except GpuLifecycleError as exc:
                self._mark_down(state, exc)
                gpus.append(self._down_gpu(state))
                continue
            gpus.append(gpu)
            processes.extend(procs)
        self.gpm.end_cycle()
        readings = DeviceReadings(node=self.node, timestamp=now, gpus=tuple(gpus), processes=tuple(processes))
        self.directory = DeviceDirectory.from_readings(readings)
        return readings

    def close(self) -> None:
        """Stop the XID thread and free GPM samples. NVML itself stays loaded until the process exits."""
        self.xids.stop()
        self.gpm.close()

    # -- helpers others call --------------------------------------------------------------------------

    def live_handles(self) -> Mapping[str, Any]:
        return {s.uuid: s.handle for s in self._gpus.values() if not s.down}

    def drain_xid_events(self) -> list[XidEvent]:
        """XID events seen since the previous call (the cycle turns them into span events)."""
        return self.xids.drain_recent()

    def take_errors(self) -> dict[str, int]:
        """Unexpected NVML answers (neither a value, absent, benign nor a lost GPU: ``Unknown``,
        ``InvalidArgument``...) since the previous call, readings and the XID watch alike, under ``nvml``
        (:class:`~gpulens.core.device_model.ErrorCounting`). A lost GPU is ``gpulens_gpu_up`` 0, not counted here."""
        seen = self.funnel.errors_of(ErrorClass.OTHER)
        new, self._unexpected_taken = seen - self._unexpected_taken, seen
        return {NVML_SOURCE: new} if new else {}

    def gpu_errors(self) -> dict[str, str]:
        """UUID -> last lifecycle error of GPUs currently down."""
        return {s.uuid: s.last_error or "" for s in self._gpus.values() if s.down}

    # -- discovery and recovery -----------------------------------------------------------------------

    def _discover(self) -> None:
        count = self.funnel.call("nvmlDeviceGetCount") or 0
        for index in range(int(count)):
            try:
                handle = self.funnel.call("nvmlDeviceGetHandleByIndex", index)
                if handle is None:
                    continue
                uuid = _text(self.funnel.call("nvmlDeviceGetUUID", handle))
            except GpuLifecycleError as exc:
                log.warning("GPU index %d did not answer at start: %s", index, exc)
                continue
            if uuid is None:
                continue
            state = self._gpus.get(uuid)
            if state is None:
                state = _GpuState(uuid, index, handle, "", 0, backoff=self._backoff_initial)
                self._gpus[uuid] = state
            state.handle, state.index = handle, index
            self._probe(state)

    def _probe(self, state: _GpuState) -> None:
        """Learn once which optional families this GPU answers, so cycles skip the rest."""
        f, h = self.funnel, state.handle
        state.model = _text(f.call("nvmlDeviceGetName", h)) or state.model or "unknown"
        mem = f.call("nvmlDeviceGetMemoryInfo", h)
        if mem is not None:
            state.memory_total_bytes = int(mem.total)
        support = f.call("nvmlGpmQueryDeviceSupport", h)
        state.gpm = bool(support is not None and getattr(support, "isSupportedDevice", 0))
        probes: dict[str, tuple[Any, ...]] = {
            "nvmlDeviceGetTotalEnergyConsumption": (h,),
            "nvmlDeviceGetRemappedRows": (h,),
            "nvmlDeviceGetRetiredPages": (h, self.nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
            "nvmlDeviceGetPcieReplayCounter": (h,),
            "nvmlDeviceGetViolationStatus": (h, self.nvml.NVML_PERF_POLICY_THERMAL),
            "nvmlDeviceGetFieldValues": (h, [self.nvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL]),
            "nvmlDeviceGetCurrentClocksEventReasons": (h,),
            "nvmlDeviceGetTotalEccErrors": (
                h, self.nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, self.nvml.NVML_AGGREGATE_ECC),
        }
        state.absent = {name for name, args in probes.items() if not f.probe(name, *args)}

    def _try_recover(self, state: _GpuState) -> bool:
        if self._monotonic() < state.retry_at:
            return False
        try:
            handle = self.funnel.call("nvmlDeviceGetHandleByUUID", state.uuid)
        except GpuLifecycleError as exc:
            self._mark_down(state, exc)
            return False
        if handle is None:
            self._mark_down(state, None)
            return False
        state.handle = handle
        state.down = False
        state.backoff = self._backoff_initial
        log.info("GPU %s answers again", state.uuid)
        return True

    def _mark_down(self, state: _GpuState, exc: GpuLifecycleError | None) -> None:
        if not state.down:
            log.warning("GPU %s is down: %s", state.uuid, exc)
        state.down = True
        state.last_error = str(exc) if exc else "handle not found"
        state.retry_at = self._monotonic() + state.backoff
        state.backoff = min(state.backoff * 2, self._backoff_max)
        self.gpm.forget_gpu(state.uuid)
        if exc is not None and exc.driver_wide and not self._driver_down:
            self._driver_down = True
            self._driver_retry_at = self._monotonic() + self._driver_backoff

    def _reinitialise(self) -> None:
        try:
            self.nvml.nvmlInit()
            self._discover()
        except Exception as exc:  # any failure: try again later, keep serving
            log.warning("NVML re-initialisation failed: %s", exc)
            self._driver_backoff = min(self._driver_backoff * 2, self._backoff_max)
            self._driver_retry_at = self._monotonic() + self._driver_backoff
            return
        self._driver_down = False
        self._driver_backoff = self._backoff_initial
        for state in self._gpus.values():
            state.retry_at = 0.0

    def _down_gpu(self, state: _GpuState) -> Gpu:
        return Gpu(
            uuid=state.uuid,
            index=state.index,
            model=state.model,
            memory_total_bytes=state.memory_total_bytes,
            sharing_mode=SharingMode.EXCLUSIVE,
            up=False,
            driver_version=self.driver_version,
        )

    # -- one GPU ---------------------------------------------------------------------------------------

    def _read_gpu(self, state: _GpuState, now: float) -> tuple[Gpu, list[GpuProcess]]:
        f, h = self.funnel, state.handle
        mode = f.call("nvmlDeviceGetMigMode", h)
        is_mig = mode is not None and int(mode[0]) == int(self.nvml.NVML_DEVICE_MIG_ENABLE)
        mem = f.call("nvmlDeviceGetMemoryInfo", h)
        activity: float | None = None
        if state.gpm:
            activity = self.gpm.activity((state.uuid, None), h, "gpu", now)
        elif not is_mig:  # utilization rates are not supported on MIG-enabled GPUs: never ask
            util = f.call("nvmlDeviceGetUtilizationRates", h)
            activity = float(util.gpu) / 100.0 if util is not None else None
        replicas = 1
        if is_mig:
            migs, processes = self._read_migs(state, now)
            mode = SharingMode.MIG
        else:
            migs, processes = (), self._processes(h, state.uuid, state)
            replicas = max(1, int(self.replicas().get(state.uuid, 1)))
            mode = SharingMode.TIME_SLICING if replicas > 1 else SharingMode.EXCLUSIVE
        gpu = Gpu(
            uuid=state.uuid,
            index=state.index,
            model=state.model,
            memory_total_bytes=int(mem.total) if mem is not None else state.memory_total_bytes,
            sharing_mode=mode,
            memory_used_bytes=int(mem.used) if mem is not None else None,
            activity_ratio=activity,
            mig_instances=migs,
            replicas=replicas,
            health=self._health(state),
            driver_version=self.driver_version,
            topology=self._topology[state.uuid][0] if state.uuid in self._topology else None,
            nvlink_domain=self._topology[state.uuid][1] if state.uuid in self._topology else None,
        )
        return gpu, processes

    def _read_topology(self) -> dict[str, tuple[GpuTopology, str | None]]:
        """Topology of every GPU that answers, read once (it changes only with the hardware)."""
        live = sorted((s.index, s.uuid, s.handle) for s in self._gpus.values() if not s.down)
        try:
            found = read_topology(self.funnel, self.nvml, live)
        except GpuLifecycleError as exc:
            log.warning("topology not read: %s", exc)
            return {}
        uuids = [u for _, u, _ in live if u in found]
        index = {u: i for i, u, _ in live}
        domains = nvlink_domains(self.node, [index[u] for u in uuids], [found[u] for u in uuids])
        return {u: (found[u], d) for u, d in zip(uuids, domains, strict=True)}

    def _read_migs(self, state: _GpuState, now: float) -> tuple[tuple[MigInstance, ...], list[GpuProcess]]:
        f, h = self.funnel, state.handle
        raw: list[MigInstance] = []
        processes: list[GpuProcess] = []
        seen: set[str] = set()
        if not state.mig_slots:
            state.mig_slots = int(f.call("nvmlDeviceGetMaxMigDeviceCount", h) or 0)
        for slot in range(state.mig_slots):
            mh = f.call("nvmlDeviceGetMigDeviceHandleByIndex", h, slot)  # NotFound on empty slots -> None
            if mh is None:
                continue
            uuid = _text(f.call("nvmlDeviceGetUUID", mh))
            if uuid is None:
                continue
            static = self._mig_static.get(uuid)
            if static is None:  # a MIG UUID never changes its ids or profile: a recreated instance gets a new UUID
                identity = self._mig_identity(mh)
                if identity is None:
                    continue
                static = self._mig_static[uuid] = identity
            seen.add(uuid)
            mem = f.call("nvmlDeviceGetMemoryInfo", mh)
            total = int(mem.total) if mem is not None else static.memory_bytes
            raw.append(MigInstance(
                uuid=uuid,
                parent_uuid=state.uuid,
                gpu_instance_id=static.gpu_instance_id,
                compute_instance_id=static.compute_instance_id,
                profile=static.profile,
                slices=static.gi_slices,
                memory_total_bytes=total,
                memory_used_bytes=int(mem.used) if mem is not None else None,
                compute_instance_slices=static.ci_slices if static.ci_slices < static.gi_slices else None,
            ))
            processes.extend(self._processes(mh, uuid, None))
        for gone in [u for u, _ in self._mig_static.items() if u not in seen and u in state.mig_uuids]:
            del self._mig_static[gone]
        state.mig_uuids = seen
        by_gi: dict[int, list[MigInstance]] = {}
        for mig in sorted(raw, key=lambda m: (m.gpu_instance_id, m.compute_instance_id)):
            by_gi.setdefault(mig.gpu_instance_id, []).append(mig)
        migs: list[MigInstance] = []
        for gi, members in by_gi.items():
            activity = None
            if state.gpm:  # one GPM sample per GPU instance; the fingerprint detects a recreated instance
                fingerprint = "|".join(f"{m.uuid}:{m.profile}:{m.compute_instance_id}" for m in members)
                activity = self.gpm.activity((state.uuid, gi), h, fingerprint, now)
            migs.extend(_with_activity(m, activity) for m in members)
        return tuple(migs), processes

    def _mig_identity(self, mh: Any) -> _MigIdentity | None:
        """What never changes for a MIG device UUID (read once per UUID); None when it has no GI id."""
        f = self.funnel
        gi = f.call("nvmlDeviceGetGpuInstanceId", mh)
        if gi is None:
            return None
        ci = f.call("nvmlDeviceGetComputeInstanceId", mh)
        attrs = f.call("nvmlDeviceGetAttributes_v2", mh)
        profile = _mig_profile(_text(f.call("nvmlDeviceGetName", mh)), attrs)
        gi_slices = int(attrs.gpuInstanceSliceCount) if attrs is not None else profile_slices(profile)
        ci_slices = int(attrs.computeInstanceSliceCount) if attrs is not None else gi_slices
        memory = int(getattr(attrs, "memorySizeMB", 0)) * MIB
        return _MigIdentity(int(gi), int(ci or 0), profile, gi_slices, ci_slices, memory)

    def _processes(self, handle: Any, device_id: str, state: _GpuState | None) -> list[GpuProcess]:
        """Compute processes with their memory; per-process SM utilization on non-MIG GPUs only."""
        running = self.funnel.call("nvmlDeviceGetComputeRunningProcesses", handle) or []
        sm: dict[int, float] = {}
        if state is not None and running:
            samples = self.funnel.call("nvmlDeviceGetProcessUtilization", handle, state.process_ts_us) or []
            for s in samples:
                sm[int(s.pid)] = float(s.smUtil) / 100.0
                state.process_ts_us = max(state.process_ts_us, int(s.timeStamp))
        out = []
        for p in running:
            pid = int(p.pid)
            used = getattr(p, "usedGpuMemory", None)
            out.append(GpuProcess(
                pid=pid,
                device_id=device_id,
                used_memory_bytes=int(used) if used is not None else None,
                sm_utilization_ratio=sm.get(pid),
                pod_uid=self._pids.pod_uid(pid) if self._pids is not None else None,
            ))
        return out

    def _health(self, state: _GpuState) -> HealthReadings:
        f, h, nv, absent = self.funnel, state.handle, self.nvml, state.absent

        def opt(name: str, *args: Any) -> Any:
            return None if name in absent else f.call(name, *args)

        temp = f.call("nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU)
        power_mw = f.call("nvmlDeviceGetPowerUsage", h)
        energy_mj = opt("nvmlDeviceGetTotalEnergyConsumption", h)
        sm_mhz = f.call("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM)
        mem_mhz = f.call("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_MEM)
        reasons = opt("nvmlDeviceGetCurrentClocksEventReasons", h)
        corrected = opt("nvmlDeviceGetTotalEccErrors", h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC)
        uncorrected = opt("nvmlDeviceGetTotalEccErrors", h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                          nv.NVML_AGGREGATE_ECC)
        retired: int | None = None
        if "nvmlDeviceGetRetiredPages" not in absent:
            pages = [f.call("nvmlDeviceGetRetiredPages", h, cause) for cause in (
                nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)]
            if any(p is not None for p in pages):
                retired = sum(len(p) for p in pages if p is not None)
        remap = opt("nvmlDeviceGetRemappedRows", h)
        replay = opt("nvmlDeviceGetPcieReplayCounter", h)
        crc: int | None = None
        fields = opt("nvmlDeviceGetFieldValues", h, [nv.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL])
        if fields is not None and len(fields) and int(fields[0].nvmlReturn) == 0:
            crc = int(fields[0].value.ullVal)
        violation = opt("nvmlDeviceGetViolationStatus", h, nv.NVML_PERF_POLICY_THERMAL)
        counts, last_seen = self.xids.counts(state.uuid)
        return HealthReadings(
            temperature_celsius=float(temp) if temp is not None else None,
            power_watts=float(power_mw) / 1000.0 if power_mw is not None else None,
            energy_joules=float(energy_mj) / 1000.0 if energy_mj is not None else None,
            sm_clock_hz=float(sm_mhz) * 1e6 if sm_mhz is not None else None,
            memory_clock_hz=float(mem_mhz) * 1e6 if mem_mhz is not None else None,
            throttle_reasons=_reasons(reasons),
            ecc_corrected_total=int(corrected) if corrected is not None else None,
            ecc_uncorrected_total=int(uncorrected) if uncorrected is not None else None,
            retired_pages_total=retired,
            remapped_rows_failure=bool(remap[3]) if remap is not None else None,
            pcie_replay_total=int(replay) if replay is not None else None,
            nvlink_crc_errors_total=crc,
            thermal_violation_seconds_total=(
                float(violation.violationTime) / 1e9 if violation is not None else None),
            xid_counts=counts,
            xid_last_seen=last_seen,
        )


def _with_activity(mig: MigInstance, activity: float | None) -> MigInstance:
    return mig if activity is None else replace(mig, activity_ratio=activity)


def _reasons(mask: Any) -> frozenset[str]:
    if mask is None:
        return frozenset()
    return frozenset(name for bit, name in THROTTLE_REASONS if int(mask) & bit)


def _mig_profile(name: str | None, attrs: Any) -> str:
    """``NVIDIA H200 MIG 1c.3g.71gb`` -> ``3g.71gb`` (the GPU-instance profile); from attributes otherwise."""
    if name and " MIG " in f" {name} ":
        last = name.split()[-1]
        parts = last.split(".")
        if len(parts) == 3 and parts[0].endswith("c"):
            return ".".join(parts[1:])
        return last
    if attrs is not None:
        return f"{int(attrs.gpuInstanceSliceCount)}g.{round(int(attrs.memorySizeMB) / 1024)}gb"
    return "unknown"


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)
