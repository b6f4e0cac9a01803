"""Which devices of a GPU can be allocated is decided once; the exposition, OTel and sim history agree."""

from __future__ import annotations

from dataclasses import replace

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families

from exporter.otel.metrics import register_instruments
from gpulens.core import metric_catalog as M
from gpulens.core.device_model import DeviceReadings, Gpu, NodeSnapshot, SharingMode, allocatable_devices
from gpulens.sim.history import snapshot_rows
from tests.support.exporter import fake_cycle, render_text
from tests.support.fakes import h100_exclusive_gpu, h100_time_sliced_gpu, h200_mig_gpu

GIB = 1024**3


def mig_gpu_without_instances() -> Gpu:
    """An H100 with MIG mode on and no instance created yet (right after ``nvidia-smi -mig 1``)."""
    return Gpu("GPU-66666666-6666-6666-6666-666666666666", 5, "NVIDIA H100 80GB HBM3", 80 * GIB, SharingMode.MIG,
               memory_used_bytes=0, activity_ratio=0.0, driver_version="590.48.01")


def test_a_whole_gpu_offers_itself_and_carries_its_memory() -> None:
    for gpu in (h100_exclusive_gpu(), h100_time_sliced_gpu()):
        (device,) = allocatable_devices(gpu)
        assert (device.uuid, device.mig, device.carries_memory, device.profile, device.gpu_equivalents) == (
            gpu.uuid, None, True, "gpu", 1.0)


def test_a_mig_gpu_offers_its_instances_in_order_and_one_per_gpu_instance_carries_memory() -> None:
    gpu = h200_mig_gpu()
    shuffled = replace(gpu, mig_instances=tuple(reversed(gpu.mig_instances)))
    devices = allocatable_devices(shuffled)
    assert [(d.mig.gpu_instance_id, d.mig.compute_instance_id) for d in devices if d.mig] == [(2, 0), (5, 0), (5, 1), (9, 0)]
    assert [d.carries_memory for d in devices] == [True, True, False, True]
    assert gpu.uuid not in {d.uuid for d in devices}


def test_a_mig_gpu_without_instances_offers_nothing() -> None:
    assert allocatable_devices(mig_gpu_without_instances()) == ()


def exposition_devices(snapshot_gpus: tuple[Gpu, ...]) -> set[str]:
    cycle, _, _ = fake_cycle(DeviceReadings("node-a", 0.0, snapshot_gpus))
    text = render_text(cycle.run_once())
    return {s.labels["device"] for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == M.DEVICE_GPU_EQUIVALENTS.name}


def otel_devices(snapshot: NodeSnapshot) -> set[str]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    register_instruments(provider.get_meter("test"), lambda: snapshot, dict)
    data = reader.get_metrics_data()
    provider.shutdown()
    assert data is not None
    assert M.DEVICE_MEMORY_TOTAL_BYTES.otel is not None
    return {str(p.attributes["hw.id"]) for rm in data.resource_metrics for sm in rm.scope_metrics
            for m in sm.metrics if m.name == M.DEVICE_MEMORY_TOTAL_BYTES.otel.name for p in m.data.data_points}


def test_exposition_otel_and_simulated_history_offer_the_same_devices_for_a_mig_gpu_without_instances() -> None:
    gpus = (mig_gpu_without_instances(), h200_mig_gpu(), h100_exclusive_gpu())
    expected = {d.uuid for g in gpus for d in allocatable_devices(g)}
    snapshot = NodeSnapshot("node-a", 0.0, gpus)
    assert "GPU-66666666-6666-6666-6666-666666666666" not in expected
    assert exposition_devices(gpus) == expected
    assert otel_devices(snapshot) == {d.uuid for g in gpus for d in allocatable_devices(g) if d.carries_memory}
    assert {row["device_id"] for row in snapshot_rows(snapshot)["device_samples"]} == expected
