"""The background collection cycle: snapshots, error counting, health and OpenTelemetry spans."""

from __future__ import annotations

import time
from dataclasses import replace

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from exporter.cycle import CollectionCycle, ExporterState, health_status
from gpulens.core.device_model import DeviceReadings, HealthReadings, XidEvent
from tests.support.exporter import fake_cycle, fixed_timer, render_text
from tests.support.fakes import (
    FakeAllocationSource,
    FakeClock,
    FakeDeviceSource,
    every_family_allocations,
    every_family_readings,
)


def test_a_failing_allocation_source_keeps_devices_served_without_pod_labels() -> None:
    cycle, devices, allocs = fake_cycle(every_family_readings(), every_family_allocations())
    cycle.run_once()
    allocs.fail_with = TimeoutError("kubelet socket did not answer")
    state = cycle.run_once()
    text = render_text(state)
    assert "gpulens_device_gpu_equivalents{" in text
    assert "gpulens_allocation_gpu_equivalents{" not in text
    assert 'gpulens_exporter_errors_total{node="node-a",source="kubelet"} 1.0' in text
    assert state.last_error is None  # devices were read: the cycle is healthy
    state = cycle.run_once()
    assert state.errors_total == {"devices": 0, "kubelet": 2}


def test_a_failing_device_source_is_counted_and_allocations_still_flow() -> None:
    clock = FakeClock()
    cycle, devices, _ = fake_cycle(every_family_readings(), every_family_allocations(), clock=clock)
    good = cycle.run_once()
    devices.fail_with = RuntimeError("NVML: driver not loaded")
    clock.advance(5)
    bad = cycle.run_once()
    assert bad.errors_total["devices"] == 1
    assert bad.snapshot is not None and bad.snapshot.gpus == ()
    assert len(bad.snapshot.allocations) == len(every_family_allocations())
    assert bad.last_success_timestamp == good.last_success_timestamp
    assert bad.last_error is not None and "driver not loaded" in bad.last_error


def test_source_counted_errors_are_added_to_the_error_counter() -> None:
    class TenantAwareAllocations(FakeAllocationSource):
        def take_errors(self) -> dict[str, int]:
            return {"tenants": 2}

    cycle = CollectionCycle(FakeDeviceSource(every_family_readings()), TenantAwareAllocations(),
                            node="node-a", clock=FakeClock(), timer=fixed_timer())
    cycle.run_once()
    assert cycle.run_once().errors_total == {"devices": 0, "kubelet": 0, "tenants": 4}


def test_health_is_ok_while_recent_and_explains_why_not_otherwise() -> None:
    clock = FakeClock()
    cycle, devices, _ = fake_cycle(every_family_readings(), clock=clock)
    ok, reason = health_status(cycle.state(), clock(), 15)
    assert not ok and "no collection cycle" in reason
    cycle.run_once()
    assert health_status(cycle.state(), clock(), 15)[0]
    devices.fail_with = RuntimeError("GPU is lost")
    clock.advance(20)
    cycle.run_once()
    ok, reason = health_status(cycle.state(), clock(), 15)
    assert not ok and "20.0s ago" in reason and "GPU is lost" in reason


def test_snapshots_carry_the_clock_time_and_the_source_node() -> None:
    clock = FakeClock(1_800_000_000.0)
    cycle, _, _ = fake_cycle(every_family_readings(node="gpu-node-7"), clock=clock, node="configured")
    state = cycle.run_once()
    assert state.snapshot is not None
    assert (state.node, state.snapshot.node, state.snapshot.timestamp) == ("gpu-node-7", "gpu-node-7", 1_800_000_000.0)
    assert state.last_cycle_duration_seconds == 0.25


def test_the_background_thread_runs_a_cycle_per_interval_and_stops() -> None:
    devices = FakeDeviceSource(every_family_readings())
    cycle = CollectionCycle(devices, FakeAllocationSource(), node="node-a", interval_seconds=0.05)
    cycle.start()
    deadline = time.monotonic() + 10
    while cycle.state().cycles_total < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    cycle.stop()
    reads = devices.reads
    assert reads >= 3
    time.sleep(0.15)
    assert devices.reads == reads == cycle.state().cycles_total


def test_a_listener_failure_does_not_stop_collection() -> None:
    cycle, _, _ = fake_cycle(every_family_readings())
    seen: list[ExporterState] = []

    def broken(_state: ExporterState) -> None:
        raise ValueError("consumer bug")

    cycle.add_listener(broken)
    cycle.add_listener(seen.append)
    state = cycle.run_once()
    assert seen == [state]


def _traced_cycle(readings: list[DeviceReadings]) -> tuple[CollectionCycle, InMemorySpanExporter, FakeAllocationSource]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    it = iter(readings)
    allocs = FakeAllocationSource(every_family_allocations())
    cycle = CollectionCycle(FakeDeviceSource(lambda _now: next(it)), allocs, node="node-a",
                            clock=FakeClock(), timer=fixed_timer(), tracer_provider=provider)
    return cycle, exporter, allocs


def test_each_cycle_is_a_span_with_device_and_allocation_children() -> None:
    cycle, spans, allocs = _traced_cycle([every_family_readings()])
    allocs.fail_with = ConnectionError("no socket")
    cycle.run_once()
    by_name = {s.name: s for s in spans.get_finished_spans()}
    assert set(by_name) == {"gpulens.collect_cycle", "gpulens.read_devices", "gpulens.read_allocations"}
    root = by_name["gpulens.collect_cycle"]
    for child in ("gpulens.read_devices", "gpulens.read_allocations"):
        parent, context = by_name[child].parent, root.context
        assert parent is not None and context is not None and parent.span_id == context.span_id
    assert by_name["gpulens.read_allocations"].status.status_code.name == "ERROR"
    assert by_name["gpulens.read_devices"].status.status_code.name == "UNSET"


def test_rising_xid_counts_and_gpu_health_changes_become_span_events() -> None:
    first = every_family_readings()
    h200 = first.gpus[0]
    worse = replace(h200, up=False, health=HealthReadings(xid_counts={13: 2, 79: 1}))
    second = replace(first, gpus=(worse, *first.gpus[1:]))
    cycle, spans, _ = _traced_cycle([first, second, second])
    for _ in range(3):
        cycle.run_once()
    roots = [s for s in spans.get_finished_spans() if s.name == "gpulens.collect_cycle"]
    events = [[(e.name, dict(e.attributes or {})) for e in root.events] for root in roots]
    # first cycle: every XID seen so far, and the GPU that is already lost
    assert ("xid", {"gpu": h200.uuid, "xid": 13, "count": 2, "total": 2}) in events[0]
    assert ("gpu_health_change", {"gpu": first.gpus[4].uuid, "up": False}) in events[0]
    # second cycle: only the new XID 79 and the H200 going down
    assert events[1] == [("xid", {"gpu": h200.uuid, "xid": 79, "count": 1, "total": 1}),
                         ("gpu_health_change", {"gpu": h200.uuid, "up": False})]
    assert events[2] == []


class _XidReportingSource(FakeDeviceSource):
    """A device source that, like NVML's, also reports XID events one by one with their MIG instance."""

    def __init__(self, readings: list[DeviceReadings], events: list[list[XidEvent]]) -> None:
        it = iter(readings)
        super().__init__(lambda _now: next(it))
        self._events = iter(events)

    def drain_xid_events(self) -> list[XidEvent]:
        return next(self._events, [])


def test_xid_span_events_name_the_gpu_and_compute_instances_the_driver_reported() -> None:
    first = every_family_readings()
    h200 = first.gpus[0]
    rising = dict(h200.health.xid_counts) | {79: h200.health.xid_counts.get(79, 0) + 2}
    second = replace(first, gpus=(replace(h200, health=HealthReadings(xid_counts=rising)), *first.gpus[1:]))
    events = [[], [XidEvent(h200.uuid, 79, 1.0, 3, 0), XidEvent(h200.uuid, 79, 2.0, 5, None)]]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    cycle = CollectionCycle(_XidReportingSource([first, second], events), FakeAllocationSource(), node="node-a",
                            clock=FakeClock(), timer=fixed_timer(), tracer_provider=provider)
    cycle.run_once()
    cycle.run_once()
    root = [s for s in exporter.get_finished_spans() if s.name == "gpulens.collect_cycle"][-1]
    (xid,) = [dict(e.attributes or {}) for e in root.events if e.name == "xid"]
    assert xid["gpu"] == h200.uuid and xid["xid"] == 79
    assert tuple(xid["gpu_instance_ids"]) == (3, 5) and tuple(xid["compute_instance_ids"]) == (0,)


def test_equal_snapshots_hash_equal() -> None:
    a, b = every_family_readings(), every_family_readings()
    assert a == b and hash(a.gpus[0].health) == hash(b.gpus[0].health)
    state_a = ExporterState(node="n", errors_total={"devices": 1})
    state_b = ExporterState(node="n", errors_total={"devices": 1})
    assert state_a == state_b and hash(state_a) == hash(state_b)
    assert len({state_a, state_b}) == 1
