"""XID events: counted per code and GPU by the event thread, last-seen time kept, every code kept."""

from __future__ import annotations

import time

from exporter.nvml.funnel import NvmlFunnel
from exporter.nvml.source import NvmlDeviceSource
from exporter.nvml.xid import XidWatcher
from tests.fakes.nvml import FakeNvml
from tests.fakes.nvml_captures import H100_NO_MIG, H200_MIG, load_capture

H200 = "GPU-22222222-0000-0000-0000-000000000002"
H100 = "GPU-33333333-0000-0000-0000-000000000003"


def fake_node() -> FakeNvml:
    return FakeNvml([load_capture(H200_MIG, uuid=H200), load_capture(H100_NO_MIG, uuid=H100)])


def test_xid_events_are_counted_per_code_with_last_seen_time_and_gpu_instance() -> None:
    fake = fake_node()
    handles = {g.uuid: fake.nvmlDeviceGetHandleByUUID(g.uuid) for g in fake.gpus}
    times = iter([100.0, 200.0, 300.0])
    watcher = XidWatcher(NvmlFunnel(fake), lambda: handles, clock=lambda: next(times), wait_ms=1)
    assert watcher.poll_once() is None, "a timeout is the normal nothing-happened"
    fake.emit_xid(H200, 31, gpu_instance_id=9)
    fake.emit_xid(H200, 31)
    fake.emit_xid(H200, 79)
    events = [watcher.poll_once() for _ in range(3)]
    assert [e.gpu_instance_id for e in events if e] == [9, None, None]
    counts, last_seen = watcher.counts(H200)
    assert counts == {31: 2, 79: 1} and last_seen == {31: 200.0, 79: 300.0}
    assert watcher.counts(H100) == ({}, {})


def test_the_event_thread_feeds_health_readings_of_the_source() -> None:
    fake = fake_node()
    source = NvmlDeviceSource(fake, "node-a", xid_wait_ms=5)
    try:
        fake.emit_xid(H100, 48)
        fake.emit_xid(H100, 48)
        fake.emit_xid(H100, 94)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            gpu = next(g for g in source.read_devices(fake.now).gpus if g.uuid == H100)
            if sum(gpu.health.xid_counts.values()) == 3:
                break
            time.sleep(0.02)
        assert dict(gpu.health.xid_counts) == {48: 2, 94: 1}
        assert set(gpu.health.xid_last_seen) == {48, 94}
    finally:
        source.close()


def test_a_driver_without_events_disables_xid_watching_without_crashing() -> None:
    fake = FakeNvml([load_capture(H100_NO_MIG, uuid=H100)], missing={"nvmlEventSetCreate"})
    watcher = XidWatcher(NvmlFunnel(fake), lambda: {}, wait_ms=1)
    watcher.run()  # returns at once instead of looping
    assert watcher.rebuilds == 0
