"""OpenTelemetry observable instruments that read the cycle's last snapshot (never a hardware source).

Names follow the hardware semantic conventions where they exist (``hw.gpu.utilization``,
``hw.gpu.memory.usage``/``limit``, ``hw.power``, ``hw.energy``, ``hw.temperature``, ``hw.errors``,
``hw.status``, with ``hw.id``/``hw.parent``/``hw.type``); allocation and XID readings, which have no
convention, use the ``gpulens.`` namespace with ``k8s.*`` attributes for the pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from gpulens.exporter.model import WHOLE_GPU_PROFILE, Gpu, NodeSnapshot

SnapshotProvider = Callable[[], NodeSnapshot | None]


def _gpu_attrs(gpu: Gpu) -> dict[str, Any]:
    return {"hw.id": gpu.uuid, "hw.type": "gpu", "hw.model": gpu.model, "hw.name": f"gpu{gpu.index}"}


def _devices(snapshot: NodeSnapshot) -> Iterable[tuple[dict[str, Any], float | None, int | None, int, bool]]:
    """(attributes, activity, memory used, memory total, first CI of its GI) per allocatable device."""
    for gpu in snapshot.gpus:
        if not gpu.up:
            continue
        if not gpu.mig_instances:
            attrs = {**_gpu_attrs(gpu), "gpulens.profile": WHOLE_GPU_PROFILE}
            yield attrs, gpu.activity_ratio, gpu.memory_used_bytes, gpu.memory_total_bytes, True
            continue
        seen: set[int] = set()
        for mig in gpu.mig_instances:
            attrs = {"hw.id": mig.uuid, "hw.type": "gpu", "hw.parent": gpu.uuid, "hw.model": gpu.model,
                     "gpulens.profile": mig.profile, "gpulens.gpu_instance": mig.gpu_instance_id,
                     "gpulens.compute_instance": mig.compute_instance_id}
            first = mig.gpu_instance_id not in seen
            seen.add(mig.gpu_instance_id)
            yield attrs, mig.activity_ratio, mig.memory_used_bytes, mig.memory_total_bytes, first


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
            attrs: dict[str, Any] = {"hw.id": a.device_uuid, "k8s.namespace.name": a.namespace,
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

    meter.create_observable_gauge("hw.gpu.utilization", [each(utilization)], unit="1",
                                  description="Graphics-engine activity of a GPU or MIG instance")
    meter.create_observable_up_down_counter("hw.gpu.memory.usage", [each(memory(True))], unit="By",
                                            description="GPU memory in use (once per GPU or MIG GPU instance)")
    meter.create_observable_up_down_counter("hw.gpu.memory.limit", [each(memory(False))], unit="By",
                                            description="GPU memory size (once per GPU or MIG GPU instance)")
    meter.create_observable_gauge("hw.power", [each(per_gpu(lambda g: g.health.power_watts))], unit="W",
                                  description="Power draw of the physical GPU")
    meter.create_observable_counter("hw.energy", [each(per_gpu(lambda g: g.health.energy_joules))], unit="J",
                                    description="Energy consumed since the driver loaded")
    meter.create_observable_gauge("hw.temperature", [each(per_gpu(lambda g: g.health.temperature_celsius))],
                                  unit="Cel", description="GPU core temperature")
    meter.create_observable_counter("hw.errors", [each(errors)], unit="{error}",
                                    description="Aggregate ECC errors of the GPU")
    meter.create_observable_up_down_counter("hw.status", [each(status)], unit="1",
                                            description="1 for the GPU's current state (ok / failed)")
    meter.create_observable_counter("gpulens.gpu.xid.errors", [each(xids)], unit="{event}",
                                    description="XID events by code since the exporter started")
    meter.create_observable_gauge("gpulens.allocation.gpu_equivalents", [each(allocations)], unit="1",
                                  description="Share of a device held by one container")
    meter.create_observable_gauge("gpulens.exporter.cycle.duration", [each(cycle_duration)], unit="s",
                                  description="Wall time of the last collection cycle")
    meter.create_observable_counter("gpulens.exporter.errors", [exporter_errors], unit="{error}",
                                    description="Errors by source since the exporter started")
