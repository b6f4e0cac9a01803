"""The NVML device source against FakeNvml devices replayed from real nvidia-smi captures."""

from __future__ import annotations

import pynvml
import pytest

from exporter.nvml.funnel import ErrorClass, NvmlFunnel, classify
from exporter.nvml.source import NvmlDeviceSource
from gpulens.core.device_model import DeviceReadings, SharingMode
from tests.fakes.nvml import FakeMig, FakeNvml
from tests.fakes.nvml_captures import H100_MIG, H100_NO_MIG, H200_MIG, load_capture

MIB = 1024 * 1024
H100_UUID = "GPU-11111111-0000-0000-0000-000000000001"
H200_UUID = "GPU-22222222-0000-0000-0000-000000000002"
PLAIN_UUID = "GPU-33333333-0000-0000-0000-000000000003"


class ManualClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def node_fake(**kw: object) -> FakeNvml:
    return FakeNvml([
        load_capture(H100_MIG, uuid=H100_UUID),
        load_capture(H200_MIG, uuid=H200_UUID),
        load_capture(H100_NO_MIG, uuid=PLAIN_UUID),
    ], **kw)  # type: ignore[arg-type]


def open_source(fake: FakeNvml, clock: ManualClock | None = None) -> NvmlDeviceSource:
    return NvmlDeviceSource(fake, "node-a", watch_xids=False, monotonic=clock or ManualClock())


def test_h200_mig_layout_gi_ci_ids_and_memory_per_gi_come_from_the_capture() -> None:
    fake = node_fake()
    readings = open_source(fake).read_devices(fake.now)
    h200 = next(g for g in readings.gpus if g.uuid == H200_UUID)
    assert h200.model == "NVIDIA H200" and h200.sharing_mode is SharingMode.MIG
    layout = [(m.gpu_instance_id, m.compute_instance_id, m.profile, m.compute_instance_slices)
              for m in h200.mig_instances]
    assert layout == [(2, 0, "3g.71gb", 1), (2, 1, "3g.71gb", 2), (3, 0, "2g.35gb", None),
                      (9, 0, "1g.18gb", None), (10, 0, "1g.18gb", None)]
    gi2 = [m for m in h200.mig_instances if m.gpu_instance_id == 2]
    assert {m.memory_total_bytes for m in gi2} == {71424 * MIB}, "compute instances share their GI's memory"
    assert h200.health.temperature_celsius is not None and h200.health.power_watts is not None


def test_h100_mig_reports_per_instance_processes_and_no_whole_gpu_utilization() -> None:
    fake = node_fake()
    readings = open_source(fake).read_devices(fake.now)
    h100 = next(g for g in readings.gpus if g.uuid == H100_UUID)
    assert [m.profile for m in h100.mig_instances] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    gi2 = h100.mig_instances[0]
    procs = [p for p in readings.processes if p.device_id == gi2.uuid]
    assert sorted(p.pid for p in procs) == [21180, 21181, 21198]
    assert sum(p.used_memory_bytes or 0 for p in procs) == (2296 + 1272 + 7484) * MIB
    assert h100.health.remapped_rows_failure is None, "N/A in the capture stays absent"
    assert h100.health.retired_pages_total is None


def test_utilization_rates_are_never_asked_of_mig_gpus_or_mig_devices() -> None:
    fake = node_fake()
    for gpu in fake.gpus:
        gpu.gpm_supported = False
    source = open_source(fake)
    source.read_devices(fake.now)
    asked = [args[0] for name, args in fake.calls if name == "nvmlDeviceGetUtilizationRates"]
    assert asked and all(h.gpu_uuid == PLAIN_UUID and h.mig_uuid is None for h in asked)
    readings = {g.uuid: g for g in source.read_devices(fake.now).gpus}
    assert readings[PLAIN_UUID].activity_ratio == pytest.approx(1.0)  # gpu-burn at 100 % in the capture
    h200 = readings[H200_UUID]
    assert h200.activity_ratio is None and all(m.activity_ratio is None for m in h200.mig_instances), (
        "GPU-Util is N/A in MIG mode: absent without GPM, never 0")


def test_what_never_changes_for_mig_devices_is_read_once_not_every_cycle() -> None:
    fake = node_fake()
    source = open_source(fake)
    first = source.read_devices(fake.now)
    migs = sum(len(g.mig_instances) for g in first.gpus)
    static = ("nvmlDeviceGetGpuInstanceId", "nvmlDeviceGetComputeInstanceId", "nvmlDeviceGetAttributes_v2")
    before = {name: fake.count_calls(name) for name in static}
    assert before == dict.fromkeys(static, migs)
    mig_gpus = sum(g.sharing_mode is SharingMode.MIG for g in first.gpus)
    assert fake.count_calls("nvmlDeviceGetMaxMigDeviceCount") == mig_gpus
    for _ in range(3):
        fake.advance(5.0)
        again = source.read_devices(fake.now)
    assert {name: fake.count_calls(name) for name in static} == before
    assert fake.count_calls("nvmlDeviceGetMaxMigDeviceCount") == mig_gpus, "the slot count is hardware"
    def identities(readings: DeviceReadings) -> list[tuple[object, ...]]:
        return [(m.uuid, m.gpu_instance_id, m.compute_instance_id, m.profile, m.slices, m.compute_instance_slices)
                for g in readings.gpus for m in g.mig_instances]

    assert identities(again) == identities(first)
    assert fake.count_calls("nvmlDeviceGetUUID") > migs, "slots are still re-enumerated every cycle"


def test_gpm_gives_per_gpu_instance_activity_from_samples_kept_between_cycles() -> None:
    fake = node_fake()
    h200 = fake.gpu(H200_UUID)
    for mig in h200.migs:
        mig.activity = 0.25 if mig.gpu_instance_id == 3 else 0.0
    source = open_source(fake)
    first = source.read_devices(fake.now)
    assert all(m.activity_ratio is None for g in first.gpus for m in g.mig_instances), "one sample is no rate"
    fake.advance(10.0)
    second = next(g for g in source.read_devices(fake.now).gpus if g.uuid == H200_UUID)
    by_gi = {m.gpu_instance_id: m.activity_ratio for m in second.mig_instances}
    assert by_gi[3] == pytest.approx(0.25) and by_gi[9] == pytest.approx(0.0)


def test_samples_closer_than_100ms_reuse_the_previous_value() -> None:
    fake = node_fake()
    fake.gpu(H200_UUID).migs[2].activity = 0.5
    source = open_source(fake)
    source.read_devices(fake.now)
    fake.advance(5.0)
    source.read_devices(fake.now)
    gets_before = fake.count_calls("nvmlGpmMigSampleGet")
    fake.advance(0.05)
    again = next(g for g in source.read_devices(fake.now).gpus if g.uuid == H200_UUID)
    assert fake.count_calls("nvmlGpmMigSampleGet") == gets_before
    assert again.mig_instances[2].activity_ratio == pytest.approx(0.5)


def test_mig_reconfiguration_between_cycles_invalidates_samples_and_finds_new_instances() -> None:
    fake = node_fake()
    source = open_source(fake)
    source.read_devices(fake.now)
    fake.advance(5.0)
    source.read_devices(fake.now)
    h100 = fake.gpu(H100_UUID)
    # Destroy everything and recreate GI 2 (same id) as a 7g instance: old GPM samples must not be diffed.
    h100.migs = [FakeMig("MIG-77777777-0000-0000-0000-000000000077", 2, 0, "7g.80gb", 80896, 10)]
    fake.advance(5.0)
    after = next(g for g in source.read_devices(fake.now).gpus if g.uuid == H100_UUID)
    assert [(m.uuid, m.profile, m.slices) for m in after.mig_instances] == [
        ("MIG-77777777-0000-0000-0000-000000000077", "7g.80gb", 7)]
    assert after.mig_instances[0].activity_ratio is None, "recreated instance starts a fresh sample pair"
    held = {k for k in source.gpm.held_keys if k[0] == H100_UUID}
    assert held == {(H100_UUID, None), (H100_UUID, 2)}, "samples of vanished GIs are freed"
    fake.advance(5.0)
    source.read_devices(fake.now)
    source.close()
    assert fake.samples_alive == 0


def test_a_lost_gpu_keeps_other_gpus_reporting_and_recovers_after_backoff() -> None:
    fake = node_fake()
    clock = ManualClock()
    source = open_source(fake, clock)
    fake.gpu(H200_UUID).lost = True
    readings = source.read_devices(fake.now)
    by_uuid = {g.uuid: g for g in readings.gpus}
    assert by_uuid[H200_UUID].up is False and by_uuid[H200_UUID].mig_instances == ()
    assert by_uuid[H200_UUID].health.power_watts is None
    assert by_uuid[H100_UUID].up and by_uuid[PLAIN_UUID].up and len(by_uuid[H100_UUID].mig_instances) == 4
    fake.gpu(H200_UUID).lost = False
    clock.t = 0.5  # still inside the first backoff: not retried yet
    calls = fake.count_calls("nvmlDeviceGetHandleByUUID")
    assert not {g.uuid: g for g in source.read_devices(fake.now).gpus}[H200_UUID].up
    assert fake.count_calls("nvmlDeviceGetHandleByUUID") == calls
    clock.t = 1.5
    back = {g.uuid: g for g in source.read_devices(fake.now).gpus}[H200_UUID]
    assert back.up and len(back.mig_instances) == 5
    assert fake.shutdown_calls == 0, "NVML is never shut down between cycles"


def test_function_not_found_on_an_old_driver_leaves_that_family_absent_without_crashing() -> None:
    fake = node_fake(missing={"nvmlDeviceGetTotalEnergyConsumption", "nvmlGpmQueryDeviceSupport",
                              "nvmlDeviceGetCurrentClocksEventReasons"})
    source = open_source(fake)
    for _ in range(3):
        fake.advance(2.0)
        readings = source.read_devices(fake.now)
    assert all(g.health.energy_joules is None for g in readings.gpus)
    assert all(m.activity_ratio is None for g in readings.gpus for m in g.mig_instances)
    assert all(g.health.temperature_celsius is not None for g in readings.gpus)
    assert fake.count_calls("nvmlDeviceGetTotalEnergyConsumption") == 0, "missing symbol never called again"
    assert "nvmlDeviceGetTotalEnergyConsumption" in source.funnel.missing_functions()


def test_units_are_base_units() -> None:
    fake = node_fake()
    plain = next(g for g in open_source(fake).read_devices(fake.now).gpus if g.uuid == PLAIN_UUID)
    assert plain.memory_total_bytes == 81559 * MIB
    assert plain.health.sm_clock_hz is not None and plain.health.sm_clock_hz > 1e8
    assert plain.health.thermal_violation_seconds_total == pytest.approx(2.5)
    assert plain.driver_version == "590.48.01"


def test_error_classes_follow_the_nvml_return_codes() -> None:
    assert classify(pynvml.NVML_ERROR_NOT_SUPPORTED) is ErrorClass.ABSENT
    assert classify(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND) is ErrorClass.ABSENT
    assert classify(pynvml.NVML_ERROR_GPU_IS_LOST) is ErrorClass.LIFECYCLE
    assert classify(pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH) is ErrorClass.LIFECYCLE
    assert classify(pynvml.NVML_ERROR_NOT_FOUND) is ErrorClass.BENIGN
    assert classify(pynvml.NVML_ERROR_UNKNOWN) is ErrorClass.OTHER
    fake = node_fake(missing={"nvmlDeviceGetPowerUsage"})
    funnel = NvmlFunnel(fake)
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    assert funnel.call("nvmlDeviceGetPowerUsage", handle) is None
    assert not funnel.has("nvmlDeviceGetPowerUsage")
    assert funnel.error_counts[ErrorClass.ABSENT] == 1


def test_a_driver_that_goes_away_is_reinitialised_with_backoff() -> None:
    fake = node_fake()
    clock = ManualClock()
    source = open_source(fake, clock)
    assert all(g.up for g in source.read_devices(fake.now).gpus)
    fake.driver_loaded = False  # e.g. driver reload: every call answers Uninitialized, nvmlInit fails
    assert not any(g.up for g in source.read_devices(fake.now).gpus), "all GPUs down, no crash"
    clock.t = 1.5
    assert not any(g.up for g in source.read_devices(fake.now).gpus), "re-init failed: backoff grows"
    inits = fake.init_calls
    fake.driver_loaded = True
    clock.t = 2.5  # inside the doubled backoff: no attempt yet
    source.read_devices(fake.now)
    assert fake.init_calls == inits
    clock.t = 10.0
    readings = source.read_devices(fake.now)
    assert fake.init_calls == inits + 1 and all(g.up for g in readings.gpus)
    assert sum(len(g.mig_instances) for g in readings.gpus) == 9
