"""Prometheus exposition of the last ``ExporterState``: a custom collector plus a per-snapshot render cache.

``SnapshotCollector.collect()`` builds fresh metric families from the last published state (no
module-level gauges, so a series disappears as soon as its pod or device does) and works in any
``CollectorRegistry``. ``ExpositionCache`` renders the registry once per published state and format and
serves the same bytes to every scraper. Every family here is an entry of ``gpulens.core.metric_catalog`` (documented in ``docs/metrics.md``).
"""

from __future__ import annotations

import gzip
import math
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from exporter.cycle import ExporterState
from exporter.families import new_family
from exporter.topology_exposition import topology_families
from gpulens.core import metric_catalog as M
from gpulens.core.device_model import (
    WHOLE_GPU_PROFILE,
    Allocation,
    Gpu,
    GpuProcess,
    NodeSnapshot,
    SharingMode,
    allocatable_devices,
)
from gpulens.core.vocabulary import ThrottleReason

KNOWN_THROTTLE_REASONS = tuple(str(reason) for reason in ThrottleReason)
"""Clock-event reasons reported as 0/1 for every GPU that answers (others appear when active)."""
_KNOWN_THROTTLE_SET = frozenset(KNOWN_THROTTLE_REASONS)

WARM_MEMORY = 30
"""Cycles a format stays pre-rendered after a scraper last asked for it (150 s at the default 5 s)."""

TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS_CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@dataclass(frozen=True)
class DeviceIdentity:
    """Labels of one allocatable device (whole GPU or MIG instance)."""

    gpu: str
    device: str
    model: str
    profile: str
    gpu_instance: str
    compute_instance: str
    sharing_mode: str
    activity_ratio: float | None
    gpu_equivalents: float


def device_identities(gpus: Iterable[Gpu]) -> dict[str, DeviceIdentity]:
    """Device UUID -> identity for every allocatable device of ``gpus``."""
    devices: dict[str, DeviceIdentity] = {}
    for gpu in gpus:
        for device in allocatable_devices(gpu):
            mig = device.mig
            devices[device.uuid] = DeviceIdentity(
                gpu.uuid, device.uuid, gpu.model, device.profile,
                "" if mig is None else str(mig.gpu_instance_id), "" if mig is None else str(mig.compute_instance_id),
                gpu.sharing_mode.value, gpu.activity_ratio if mig is None else mig.activity_ratio,
                device.gpu_equivalents,
            )
    return devices


def gpu_families(snapshot: NodeSnapshot) -> Iterator[Metric]:
    """Per physical GPU: identity, up, and physical readings (absent when unknown or the GPU is lost)."""
    node = snapshot.node
    info = new_family(M.GPU_INFO)
    up = new_family(M.GPU_UP)
    power = new_family(M.GPU_POWER_WATTS)
    energy = new_family(M.GPU_ENERGY_JOULES)
    temp = new_family(M.GPU_TEMPERATURE_CELSIUS)
    sm_clock = new_family(M.GPU_SM_CLOCK_HERTZ)
    mem_clock = new_family(M.GPU_MEMORY_CLOCK_HERTZ)
    throttle = new_family(M.GPU_THROTTLE_ACTIVE)
    ecc = new_family(M.GPU_ECC_ERRORS)
    retired = new_family(M.GPU_RETIRED_PAGES)
    remap = new_family(M.GPU_ROW_REMAP_FAILED)
    pcie = new_family(M.GPU_PCIE_REPLAY)
    nvlink = new_family(M.GPU_NVLINK_CRC_ERRORS)
    thermal = new_family(M.GPU_THERMAL_VIOLATION_SECONDS)
    xid = new_family(M.GPU_XID_ERRORS)
    xid_seen = new_family(M.GPU_XID_LAST_SEEN)
    for gpu in snapshot.gpus:
        key = [node, gpu.uuid]
        info.add_metric([node, gpu.uuid, str(gpu.index), gpu.model, gpu.sharing_mode.value,
                         gpu.driver_version or ""], 1.0)
        up.add_metric(key, 1.0 if gpu.up else 0.0)
        h = gpu.health
        for code in sorted(h.xid_counts):
            xid.add_metric([node, gpu.uuid, str(code)], float(h.xid_counts[code]))
        for code in sorted(h.xid_last_seen):
            xid_seen.add_metric([node, gpu.uuid, str(code)], float(h.xid_last_seen[code]))
        if not gpu.up:
            continue
        for family, value in (
            (power, h.power_watts), (energy, h.energy_joules), (temp, h.temperature_celsius),
            (sm_clock, h.sm_clock_hz), (mem_clock, h.memory_clock_hz), (retired, h.retired_pages_total),
            (pcie, h.pcie_replay_total), (nvlink, h.nvlink_crc_errors_total),
            (thermal, h.thermal_violation_seconds_total),
        ):
            if value is not None:
                family.add_metric(key, float(value))
        if h.remapped_rows_failure is not None:
            remap.add_metric(key, 1.0 if h.remapped_rows_failure else 0.0)
        for reason in (*KNOWN_THROTTLE_REASONS, *sorted(h.throttle_reasons - _KNOWN_THROTTLE_SET)):
            throttle.add_metric([node, gpu.uuid, reason], 1.0 if reason in h.throttle_reasons else 0.0)
        if h.ecc_corrected_total is not None:
            ecc.add_metric([node, gpu.uuid, "corrected"], float(h.ecc_corrected_total))
        if h.ecc_uncorrected_total is not None:
            ecc.add_metric([node, gpu.uuid, "uncorrected"], float(h.ecc_uncorrected_total))
    yield from (info, up, power, energy, temp, sm_clock, mem_clock, throttle, ecc, retired, remap, pcie,
                nvlink, thermal, xid, xid_seen)


def device_families(snapshot: NodeSnapshot, devices: dict[str, DeviceIdentity]) -> Iterator[Metric]:
    """Per allocatable device: GPU-equivalents, activity (when measured); memory once per GPU instance."""
    node = snapshot.node
    ge = new_family(M.DEVICE_GPU_EQUIVALENTS)
    activity = new_family(M.DEVICE_ACTIVITY_RATIO)
    used = new_family(M.DEVICE_MEMORY_USED_BYTES)
    total = new_family(M.DEVICE_MEMORY_TOTAL_BYTES)
    for gpu in snapshot.gpus:
        if gpu.sharing_mode is SharingMode.MIG:
            for device in allocatable_devices(gpu):
                mig = device.mig
                assert mig is not None
                d = devices[mig.uuid]
                ge.add_metric([node, gpu.uuid, mig.uuid, gpu.model, mig.profile, d.gpu_instance,
                               d.compute_instance, d.sharing_mode], d.gpu_equivalents)
                if mig.activity_ratio is not None:
                    activity.add_metric([node, gpu.uuid, mig.uuid, mig.profile, d.gpu_instance,
                                         d.compute_instance], mig.activity_ratio)
                if not device.carries_memory:
                    continue
                labels = [node, gpu.uuid, mig.uuid, mig.profile, d.gpu_instance]
                total.add_metric(labels, float(mig.memory_total_bytes))
                if mig.memory_used_bytes is not None:
                    used.add_metric(labels, float(mig.memory_used_bytes))
            continue
        ge.add_metric([node, gpu.uuid, gpu.uuid, gpu.model, WHOLE_GPU_PROFILE, "", "",
                       gpu.sharing_mode.value], 1.0)
        if not gpu.up:  # a lost GPU keeps its identity; its readings are absent
            continue
        if gpu.activity_ratio is not None:
            activity.add_metric([node, gpu.uuid, gpu.uuid, WHOLE_GPU_PROFILE, "", ""], gpu.activity_ratio)
        labels = [node, gpu.uuid, gpu.uuid, WHOLE_GPU_PROFILE, ""]
        total.add_metric(labels, float(gpu.memory_total_bytes))
        if gpu.memory_used_bytes is not None:
            used.add_metric(labels, float(gpu.memory_used_bytes))
    yield from (ge, activity, used, total)


def pod_sm_shares(processes: Iterable[GpuProcess]) -> dict[tuple[str, str], float]:
    """(device UUID, pod UID) -> summed SM utilization of the pod's measured processes on the device."""
    shares: dict[tuple[str, str], float] = {}
    for p in processes:
        if p.pod_uid is not None and p.sm_utilization_ratio is not None:
            key = (p.device_id, p.pod_uid)
            shares[key] = shares.get(key, 0.0) + p.sm_utilization_ratio
    return shares


def holder_gpu_equivalents(allocations: Iterable[Allocation]) -> dict[tuple[str, str], float]:
    """(device UUID, pod UID) -> GPU-equivalents the pod holds on the device (all its replicas together)."""
    held: dict[tuple[str, str], float] = defaultdict(float)
    for a in allocations:
        if a.pod_uid is not None:
            held[(a.device_id, a.pod_uid)] += a.gpu_equivalents
    return dict(held)


def allocation_activity(
    allocation: Allocation,
    device: DeviceIdentity | None,
    sm_shares: dict[tuple[str, str], float],
    held: dict[tuple[str, str], float] | None = None,
) -> float | None:
    """Active GPU-equivalents of one allocation, at most its allocated share; None when unmeasured.

    Per-process SM utilization of the pod's own processes (``sm_shares``, from :func:`pod_sm_shares`)
    wins (shared GPUs with attribution on): the pod's SM share of the device, capped at what the pod holds
    on it (``held``, from :func:`holder_gpu_equivalents`; a pod may hold several replicas) and split over
    its allocations by their share. Otherwise the allocated share times the device's activity. Active is
    a part of allocated: it never exceeds ``allocation.gpu_equivalents``.
    """
    if allocation.pod_uid is not None:
        share = sm_shares.get((allocation.device_id, allocation.pod_uid))
        if share is not None and math.isfinite(share):
            holder = (held or {}).get((allocation.device_id, allocation.pod_uid), allocation.gpu_equivalents)
            holder = max(holder, allocation.gpu_equivalents)
            device_ge = 1.0 if device is None else device.gpu_equivalents
            holder_active = min(_ratio(share) * device_ge, holder)
            return holder_active * allocation.gpu_equivalents / holder if holder > 0 else 0.0
    if device is None or device.activity_ratio is None or not math.isfinite(device.activity_ratio):
        return None
    return allocation.gpu_equivalents * _ratio(device.activity_ratio)


def _ratio(value: float) -> float:
    """A 0..1 ratio, clamped (a reading above 1 or below 0 never makes active exceed allocated)."""
    return min(max(value, 0.0), 1.0)


def allocation_families(snapshot: NodeSnapshot, devices: dict[str, DeviceIdentity]) -> Iterator[Metric]:
    """Allocation series per container and per-tenant node aggregates by profile."""
    node = snapshot.node
    alloc = new_family(M.ALLOCATION_GPU_EQUIVALENTS)
    allocated = new_family(M.TENANT_ALLOCATED_GPU_EQUIVALENTS)
    active = new_family(M.TENANT_ACTIVE_GPU_EQUIVALENTS)
    unmeasured = new_family(M.TENANT_UNMEASURED_GPU_EQUIVALENTS)
    count = new_family(M.TENANT_DEVICES)

    per_container: dict[tuple[str, ...], float] = defaultdict(float)
    sums: dict[tuple[str, str], list[float]] = {}
    measured: set[tuple[str, str]] = set()
    sm_shares = pod_sm_shares(snapshot.processes)  # indexed once, not scanned per allocation
    held = holder_gpu_equivalents(snapshot.allocations)
    for a in snapshot.allocations:
        d = devices.get(a.device_id)
        gpu = d.gpu if d is not None else ""
        profile = d.profile if d is not None else ""
        key = (node, gpu, a.device_id, profile, a.namespace, a.pod, a.container, a.tenant,
               a.sharing_mode.value, a.workload_kind or "", a.workload_name or "")
        per_container[key] += a.gpu_equivalents
        tkey = (a.tenant, profile)
        acc = sums.setdefault(tkey, [0.0, 0.0, 0.0, 0.0])  # allocated, active, unmeasured, devices
        acc[0] += a.gpu_equivalents
        acc[3] += 1
        act = allocation_activity(a, d, sm_shares, held)
        if act is None:
            acc[2] += a.gpu_equivalents
        else:
            acc[1] += act
            measured.add(tkey)
    for label_values, value in per_container.items():
        alloc.add_metric(list(label_values), value)
    for (tenant, profile), (a_ge, act_ge, unm_ge, n) in sorted(sums.items()):
        labels = [node, tenant, profile]
        allocated.add_metric(labels, a_ge)
        if (tenant, profile) in measured:
            active.add_metric(labels, act_ge)
        unmeasured.add_metric(labels, unm_ge)
        count.add_metric(labels, n)
    yield from (alloc, allocated, active, unmeasured, count)


def exporter_families(state: ExporterState, backend: str, version: str) -> Iterator[Metric]:
    """The exporter's own health: build info, cycles, last cycle duration and success, errors by source."""
    info = new_family(M.EXPORTER_BUILD_INFO)
    info.add_metric([version, backend], 1.0)
    cycles = new_family(M.EXPORTER_CYCLES)
    cycles.add_metric([state.node], float(state.cycles_total))
    duration = new_family(M.EXPORTER_CYCLE_DURATION_SECONDS)
    if state.last_cycle_duration_seconds is not None:
        duration.add_metric([state.node], state.last_cycle_duration_seconds)
    success = new_family(M.EXPORTER_LAST_SUCCESS)
    if state.last_success_timestamp is not None:
        success.add_metric([state.node], state.last_success_timestamp)
    errors = new_family(M.EXPORTER_ERRORS)
    for source in sorted(state.errors_total):
        errors.add_metric([state.node, source], float(state.errors_total[source]))
    yield from (info, cycles, duration, success, errors)


def state_families(state: ExporterState, backend: str, version: str) -> Iterator[Metric]:
    """Every family of ``docs/metrics.md`` for ``state`` (device families absent before the first cycle)."""
    snapshot = state.snapshot
    if snapshot is not None:
        devices = device_identities(snapshot.gpus)
        yield from gpu_families(snapshot)
        yield from topology_families(snapshot)
        yield from device_families(snapshot, devices)
        yield from allocation_families(snapshot, devices)
    yield from exporter_families(state, backend, version)


class SnapshotCollector:
    """A prometheus_client collector serving the state returned by ``state_provider()``."""

    def __init__(self, state_provider: Callable[[], ExporterState], *, backend: str, version: str) -> None:
        self._state = state_provider
        self._backend = backend
        self._version = version

    def describe(self) -> list[Metric]:
        """No eager collection at registration (the default registry would otherwise collect)."""
        return []

    def collect(self) -> Iterator[Metric]:
        yield from state_families(self._state(), self._backend, self._version)


_LEGACY_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def _escape_label_value(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


class _OneFamily:
    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> list[Metric]:
        return [self.family]


def _fast_path(family: Metric) -> bool:
    """A plain gauge or counter with legacy names and nothing OpenMetrics-specific on its samples."""
    return (
        family.type in ("gauge", "counter")
        and not family.unit
        and _LEGACY_NAME.match(family.name) is not None
        and all(_LEGACY_NAME.match(k) for k in {k for sample in family.samples for k in sample.labels})
        and all(s.timestamp is None and s.exemplar is None and s.native_histogram is None
                and not s.name.endswith("_created") for s in family.samples)
    )


def render_text(families: Iterable[Metric], *, openmetrics: bool = False) -> bytes:
    """Prometheus text 0.0.4 (or OpenMetrics 1.0), byte-identical to prometheus_client's, 3-4x faster.

    Plain gauge and counter families take the fast path (label names checked once per family, labels
    sorted by name, values escaped); any other family is handed to prometheus_client's encoder.
    """
    out: list[str] = []
    for family in families:
        if not _fast_path(family):
            if openmetrics:
                out.append(generate_openmetrics(_OneFamily(family)).decode("utf-8").removesuffix("# EOF\n"))
            else:
                out.append(generate_latest(_OneFamily(family)).decode("utf-8"))  # type: ignore[arg-type]
            continue
        doc = family.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        if openmetrics:
            name = family.name
            doc = doc.replace('"', '\\"')
        else:
            name = family.name + "_total" if family.type == "counter" else family.name
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {family.type}\n")
        for sample in family.samples:
            if sample.labels:
                labels = ",".join(f'{k}="{_escape_label_value(v)}"' for k, v in sorted(sample.labels.items()))
                out.append(f"{sample.name}{{{labels}}} {floatToGoString(sample.value)}\n")
            else:
                out.append(f"{sample.name} {floatToGoString(sample.value)}\n")
    if openmetrics:
        out.append("# EOF\n")
    return "".join(out).encode("utf-8")


@dataclass(frozen=True)
class Rendered:
    content_type: str
    body: bytes
    gzipped: bool


class ExpositionCache:
    """Renders ``registry`` once per published state and format; every scraper gets the same bytes.

    ``state_provider`` identifies the current state: the cache starts afresh when it returns a different
    object. Rendering happens under a lock, so a burst of scrapes after a cycle renders only once, and
    ``warm()`` (called after each cycle) pre-renders every format scrapers asked for, so scrapes never
    render at all in the steady state.
    """

    def __init__(self, registry: CollectorRegistry, state_provider: Callable[[], ExporterState]) -> None:
        self._registry = registry
        self._state = state_provider
        self._lock = threading.Lock()
        self._entry: tuple[ExporterState | None, dict[tuple[bool, bool], Rendered]] = (None, {})
        self._warms = 0
        self._asked: dict[tuple[bool, bool], int] = {}
        """Format -> the warm count when a scraper last asked for it."""

    def render(self, *, openmetrics: bool = False, gzipped: bool = False) -> Rendered:
        """The exposition of the current state in the asked format (cached per state)."""
        key = (openmetrics, gzipped)
        self._asked[key] = self._warms
        return self._render(key)

    def _render(self, key: tuple[bool, bool]) -> Rendered:
        openmetrics, gzipped = key
        owner, cache = self._entry
        if owner is self._state() and key in cache:
            return cache[key]
        with self._lock:
            state = self._state()
            owner, cache = self._entry
            if owner is not state:
                cache = {}
            if key not in cache:
                plain = cache.get((openmetrics, False))
                if plain is None:
                    plain = cache[(openmetrics, False)] = self._render_plain(openmetrics)
                if gzipped:
                    cache[key] = Rendered(plain.content_type, gzip.compress(plain.body, compresslevel=6, mtime=0),
                                          True)
            self._entry = (state, cache)
            return cache[key]

    def _render_plain(self, openmetrics: bool) -> Rendered:
        body = render_text(self._registry.collect(), openmetrics=openmetrics)
        return Rendered(OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE, body, False)

    def warm(self, _state: ExporterState | None = None) -> None:
        """Right after a cycle, pre-render the formats scrapers asked for lately (at first: gzipped text).

        A format nobody asked for during the last ``WARM_MEMORY`` cycles is no longer pre-rendered.
        """
        self._warms += 1
        recent = [key for key, when in list(self._asked.items()) if self._warms - when <= WARM_MEMORY]
        for key in sorted(recent or [(False, True)]):
            self._render(key)


def wants_openmetrics(accept_header: str | None) -> bool:
    """True when the client's Accept header lists OpenMetrics text."""
    return any(part.split(";")[0].strip() == "application/openmetrics-text"
               for part in (accept_header or "").split(","))


def wants_gzip(accept_encoding: str | None) -> bool:
    return any(part.split(";")[0].strip().lower() == "gzip" for part in (accept_encoding or "").split(","))
