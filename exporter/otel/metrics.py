"""OpenTelemetry observable instruments that read the cycle's last snapshot (never a hardware source).

Names follow the hardware semantic conventions where they exist (``hw.gpu.utilization``,
``hw.gpu.memory.usage``/``limit``, ``hw.power``, ``hw.energy``, ``hw.temperature``, ``hw.errors``,
``hw.status``, with ``hw.id``/``hw.parent``/``hw.type``); allocation and XID readings, which have no
convention, use the ``gpulens.`` namespace with ``k8s.*`` attributes for the pod. Each instrument is the
OTel side of a series of ``gpulens.core.metric_catalog``, which holds its name, unit and description.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from gpulens.core import metric_catalog as M
from gpulens.core.device_model import WHOLE_GPU_PROFILE, Gpu, NodeSnapshot, allocatable_devices
from gpulens.core.metric_catalog import MetricSpec, OtelKind

SnapshotProvider = Callable[[], NodeSnapshot | None]


def _gpu_attrs(gpu: Gpu) -> dict[str, Any]:
    return {"hw.id": gpu.uuid, "hw.type": "gpu", "hw.model": gpu.model, "hw.name": f"gpu{gpu.index}"}


def _devices(snapshot: NodeSnapshot) -> Iterable[tuple[dict[str, Any], float | None, int | None, int, bool]]:
    """(attributes, activity, memory used, memory total, first CI of its GI) per allocatable device."""
    for gpu in snapshot.gpus:
        if not gpu.up:
            continue
        for device in allocatable_devices(gpu):
            mig = device.mig
            if mig is None:
                attrs = {**_gpu_attrs(gpu), "gpulens.profile": WHOLE_GPU_PROFILE}
                yield attrs, gpu.activity_ratio, gpu.memory_used_bytes, gpu.memory_total_bytes, True
                continue
            attrs = {"hw.id": mig.uuid, "hw.type": "gpu", "hw.parent": gpu.uuid, "hw.model": gpu.model,
                     "gpulens.profile": mig.profile, "gpulens.gpu_instance": mig.gpu_instance_id,
                     "gpulens.compute_instance": mig.compute_instance_id}
            yield attrs, mig.activity_ratio, mig.memory_used_bytes, mig.memory_total_bytes, device.carries_memory


def register_instruments(meter: Meter, snapshot: SnapshotProvider,
                         errors_total: Callable[[], dict[str, int]]) -> None:
    """Create every observable instrument on ``meter``; callbacks read ``snapshot()`` at export time."""

    def each(fn: Callable[[NodeSnapshot], Iterable[Observation]]) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(_options: CallbackOptions) -> Iterable[Observation]:
            snap = snapshot()
            return list(fn(snap)) if snap is not None else []
        return callback

    def utilization(s: NodeSnapshot) -> Iterable[Observation]:
        for attrs, activity, _, _, _ in _devices(s):
            if activity is not None:
                yield Observation(activity, {**attrs, "hw.gpu.task": "general"})

    def memory(used_not_total: bool) -> Callable[[NodeSnapshot], Iterable[Observation]]:
        def fn(s: NodeSnapshot) -> Iterable[Observation]:
            for attrs, _, used, total, first in _devices(s):
                value = used if used_not_total else total
                if first and value is not None:  # once per GPU instance: its compute instances share it
                    yield Observation(value, attrs)
        return fn

    def per_gpu(read: Callable[[Gpu], float | None]) -> Callable[[NodeSnapshot], Iterable[Observation]]:
        def fn(s: NodeSnapshot) -> Iterable[Observation]:
            for gpu in s.gpus:
                value = read(gpu) if gpu.up else None
                if value is not None:
                    yield Observation(value, _gpu_attrs(gpu))
        return fn

    def errors(s: NodeSnapshot) -> Iterable[Observation]:
        for gpu in s.gpus:
            for kind, value in (("corrected", gpu.health.ecc_corrected_total),
                                ("uncorrected", gpu.health.ecc_uncorrected_total)):
                if gpu.up and value is not None:
                    yield Observation(value, {**_gpu_attrs(gpu), "error.type": kind})

    def status(s: NodeSnapshot) -> Iterable[Observation]:
        for gpu in s.gpus:
            for state in ("ok", "failed"):
                yield Observation(int((state == "ok") == gpu.up), {**_gpu_attrs(gpu), "hw.state": state})

    def xids(s: NodeSnapshot) -> Iterable[Observation]:
        for gpu in s.gpus:
            for code, count in gpu.health.xid_counts.items():
                yield Observation(count, {**_gpu_attrs(gpu), "gpulens.xid": code})

    def allocations(s: NodeSnapshot) -> Iterable[Observation]:
        for a in s.allocations:
            attrs: dict[str, Any] = {"hw.id": a.device_id, "k8s.namespace.name": a.namespace,
                                     "k8s.pod.name": a.pod, "k8s.container.name": a.container,
                                     "gpulens.tenant": a.tenant, "gpulens.sharing_mode": a.sharing_mode.value}
            if a.pod_uid:
                attrs["k8s.pod.uid"] = a.pod_uid
            if a.replica is not None:
                attrs["gpulens.replica"] = a.replica
            yield Observation(a.gpu_equivalents, attrs)

    def cycle_duration(s: NodeSnapshot) -> Iterable[Observation]:
        yield Observation(s.collection_seconds)

    def exporter_errors(_options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(n, {"gpulens.source": name}) for name, n in errors_total().items()]

    callbacks: dict[MetricSpec, Callable[[CallbackOptions], Iterable[Observation]]] = {
        M.DEVICE_ACTIVITY_RATIO: each(utilization),
        M.DEVICE_MEMORY_USED_BYTES: each(memory(True)),
        M.DEVICE_MEMORY_TOTAL_BYTES: each(memory(False)),
        M.GPU_POWER_WATTS: each(per_gpu(lambda g: g.health.power_watts)),
        M.GPU_ENERGY_JOULES: each(per_gpu(lambda g: g.health.energy_joules)),
        M.GPU_TEMPERATURE_CELSIUS: each(per_gpu(lambda g: g.health.temperature_celsius)),
        M.GPU_ECC_ERRORS: each(errors),
        M.GPU_UP: each(status),
        M.GPU_XID_ERRORS: each(xids),
        M.ALLOCATION_GPU_EQUIVALENTS: each(allocations),
        M.EXPORTER_CYCLE_DURATION_SECONDS: each(cycle_duration),
        M.EXPORTER_ERRORS: exporter_errors,
    }
    for spec, callback in callbacks.items():
        create_instrument(meter, spec, callback)


def create_instrument(meter: Meter, spec: MetricSpec,
                      callback: Callable[[CallbackOptions], Iterable[Observation]]) -> None:
    """The observable instrument of ``spec`` (name, kind, unit and description from the metric catalog)."""
    otel = spec.otel
    if otel is None:
        raise ValueError(f"{spec.name} has no OTel instrument in the metric catalog")
    create = {
        OtelKind.GAUGE: meter.create_observable_gauge,
        OtelKind.COUNTER: meter.create_observable_counter,
        OtelKind.UP_DOWN_COUNTER: meter.create_observable_up_down_counter,
    }[otel.kind]
    create(otel.name, [callback], unit=otel.unit, description=spec.otel_description)
