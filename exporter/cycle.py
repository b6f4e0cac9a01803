"""The background collection cycle: read devices and allocations every interval, publish a snapshot.

Scrapes and OpenTelemetry readers only read the last published ``ExporterState``; they never call a
source, so concurrent scrapes cannot multiply hardware reads. A failing source is counted in
``errors_total`` and does not stop the other one; so are the failures a source (or anything else added
with :meth:`CollectionCycle.count_errors_of`, such as the OTLP exporters) counts itself through the one
:class:`~gpulens.core.device_model.ErrorCounting` protocol.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

from gpulens.core.device_model import (
    Allocation,
    AllocationSource,
    DeviceReadings,
    DeviceSource,
    ErrorCounting,
    NodeSnapshot,
    XidEventSource,
)
from gpulens.core.hashing import value_hash

log = logging.getLogger(__name__)

DEVICES_SOURCE = "devices"
"""``source`` label of errors raised by the device source (NVML or simulator)."""


@dataclass(frozen=True)
class ExporterState:
    """Everything a scrape serves, published atomically once per cycle."""

    node: str
    snapshot: NodeSnapshot | None = None
    """Last snapshot; None before the first cycle. Its ``gpus`` is empty when the device read failed."""
    cycles_total: int = 0
    errors_total: Mapping[str, int] = field(default_factory=dict)
    """Source name -> errors since start (every known source present, 0 included)."""
    last_success_timestamp: float | None = None
    """When the last cycle that read the devices completed (clock seconds)."""
    last_cycle_duration_seconds: float | None = None
    last_error: str | None = None
    """Why the last cycle failed to read devices; None when it succeeded."""

    def __hash__(self) -> int:  # mappings are not hashable: hash their items, consistent with ==
        return value_hash(self)


def health_status(state: ExporterState, now: float, max_age_seconds: float) -> tuple[bool, str]:
    """(healthy, reason): healthy when the last successful cycle is at most ``max_age_seconds`` old."""
    if state.last_success_timestamp is None:
        if state.last_error is not None:
            return False, f"no successful collection cycle yet: {state.last_error}"
        return False, "no collection cycle completed yet"
    age = now - state.last_success_timestamp
    if age > max_age_seconds:
        reason = f"last successful collection cycle {age:.1f}s ago (limit {max_age_seconds:g}s)"
        if state.last_error is not None:
            reason += f"; last error: {state.last_error}"
        return False, reason
    return True, f"ok: last successful collection cycle {max(age, 0.0):.1f}s ago"


def _xid_instances(source: object) -> dict[tuple[str, int], dict[str, list[int]]]:
    """(gpu, code) -> the GPU- and compute-instance ids named by XID events since the last cycle (NVML only)."""
    if not isinstance(source, XidEventSource):
        return {}
    out: dict[tuple[str, int], dict[str, list[int]]] = {}
    for event in source.drain_xid_events():
        ids = out.setdefault((event.gpu_uuid, event.code), {})
        if event.gpu_instance_id is not None:
            ids.setdefault("gpu_instance_ids", []).append(event.gpu_instance_id)
        if event.compute_instance_id is not None:
            ids.setdefault("compute_instance_ids", []).append(event.compute_instance_id)
    return out


def _xid_rises(previous: NodeSnapshot | None, gpus: DeviceReadings) -> list[tuple[str, int, int, int]]:
    """(gpu uuid, xid code, increase, new total) for every XID count that rose since ``previous``."""
    before: dict[str, Mapping[int, int]] = {}
    if previous is not None:
        before = {g.uuid: g.health.xid_counts for g in previous.gpus}
    rises = []
    for gpu in gpus.gpus:
        old = before.get(gpu.uuid, {})
        for code, count in gpu.health.xid_counts.items():
            if count > old.get(code, 0):
                rises.append((gpu.uuid, code, count - old.get(code, 0), count))
    return rises


def _health_changes(previous: NodeSnapshot | None, readings: DeviceReadings) -> list[tuple[str, bool]]:
    """(gpu uuid, up) for GPUs whose up/down state changed (or that are seen down for the first time)."""
    before = {g.uuid: g.up for g in previous.gpus} if previous is not None else {}
    return [(g.uuid, g.up) for g in readings.gpus if before.get(g.uuid, True) != g.up]


class CollectionCycle:
    """Runs one collection per interval on a background thread and keeps the last ``ExporterState``.

    ``clock`` gives the wall time passed to the sources (``read_devices(now)``) and stamped on
    snapshots; ``timer`` measures cycle durations. Both are injectable for tests and virtual time.
    """

    def __init__(
        self,
        device_source: DeviceSource,
        allocation_source: AllocationSource,
        *,
        node: str,
        interval_seconds: float = 5.0,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
        allocation_source_name: str = "kubelet",
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self._devices = device_source
        self._allocations = allocation_source
        self._interval = interval_seconds
        self._clock = clock
        self._timer = timer
        self._allocation_source_name = allocation_source_name
        self._tracer = trace.get_tracer("gpulens.exporter", tracer_provider=tracer_provider)
        self._state = ExporterState(
            node=node, errors_total={DEVICES_SOURCE: 0, allocation_source_name: 0}
        )
        self._listeners: list[Callable[[ExporterState], None]] = []
        self._error_counters: list[ErrorCounting] = [
            s for s in _unique(device_source, allocation_source) if isinstance(s, ErrorCounting)]
        self._run_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def interval_seconds(self) -> float:
        return self._interval

    @property
    def node(self) -> str:
        return self._state.node

    def state(self) -> ExporterState:
        """The last published state (never blocks, never reads a source)."""
        return self._state

    def last_snapshot(self) -> NodeSnapshot | None:
        """The last snapshot, for OpenTelemetry readers and other consumers."""
        return self._state.snapshot

    def count_errors_of(self, counter: ErrorCounting) -> None:
        """Add ``counter``'s errors to ``errors_total`` every cycle (the sources are added already)."""
        if all(c is not counter for c in self._error_counters):
            self._error_counters.append(counter)

    def add_listener(self, listener: Callable[[ExporterState], None]) -> None:
        """Call ``listener(state)`` after each published cycle (e.g. to pre-render the exposition)."""
        self._listeners.append(listener)

    def run_once(self) -> ExporterState:
        """Run one collection cycle now, publish and return its state."""
        with self._run_lock:
            state = self._collect()
            self._state = state
        for listener in list(self._listeners):
            try:
                listener(state)
            except Exception:  # a consumer's bug must not stop collection
                log.exception("collection listener failed")
        return state

    def _collect(self) -> ExporterState:
        previous = self._state
        errors: dict[str, int] = {}
        started = self._timer()
        now = self._clock()
        readings: DeviceReadings | None = None
        allocations: tuple[Allocation, ...] = ()
        last_error: str | None = None
        with self._tracer.start_as_current_span("gpulens.collect_cycle") as cycle_span:
            cycle_span.set_attribute("gpulens.node", previous.node)
            with self._tracer.start_as_current_span("gpulens.read_devices") as span:
                try:
                    readings = self._devices.read_devices(now)
                    span.set_attribute("gpulens.gpus", len(readings.gpus))
                except Exception as exc:
                    errors[DEVICES_SOURCE] = 1
                    last_error = f"{DEVICES_SOURCE}: {type(exc).__name__}: {exc}"
                    log.warning("device read failed: %s", last_error)
                    _record_error(span, exc)
            with self._tracer.start_as_current_span("gpulens.read_allocations") as span:
                try:
                    allocations = tuple(self._allocations.read_allocations(now))
                    span.set_attribute("gpulens.allocations", len(allocations))
                except Exception as exc:
                    errors[self._allocation_source_name] = 1
                    log.warning("allocation read (%s) failed: %s", self._allocation_source_name, exc)
                    _record_error(span, exc)
            for name, count in _take_errors(self._error_counters).items():
                errors[name] = errors.get(name, 0) + count
            instances = _xid_instances(self._devices)
            if readings is not None:
                for gpu, code, increase, total in _xid_rises(previous.snapshot, readings):
                    event: dict[str, Any] = {"gpu": gpu, "xid": code, "count": increase, "total": total}
                    event.update(instances.get((gpu, code), {}))
                    cycle_span.add_event("xid", event)
                for gpu, up in _health_changes(previous.snapshot, readings):
                    cycle_span.add_event("gpu_health_change", {"gpu": gpu, "up": up})
            duration = self._timer() - started
            cycle_span.set_attribute("gpulens.errors", sum(errors.values()))
        snapshot = NodeSnapshot(
            node=readings.node if readings is not None else previous.node,
            timestamp=now,
            gpus=readings.gpus if readings is not None else (),
            allocations=allocations,
            processes=readings.processes if readings is not None else (),
            collection_seconds=duration,
            errors=errors,
        )
        errors_total = dict(previous.errors_total)
        for name, count in errors.items():
            errors_total[name] = errors_total.get(name, 0) + count
        completed = self._clock()
        return ExporterState(
            node=snapshot.node,
            snapshot=snapshot,
            cycles_total=previous.cycles_total + 1,
            errors_total=errors_total,
            last_success_timestamp=completed if readings is not None else previous.last_success_timestamp,
            last_cycle_duration_seconds=duration,
            last_error=last_error,
        )

    def start(self) -> None:
        """Start the background thread: a cycle runs at once unless one already ran (then after an interval)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="gpulens-collect", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        if self._state.cycles_total > 0 and self._stop.wait(self._interval):
            return
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception:  # never let the thread die; the next cycle retries
                log.exception("collection cycle failed")
            self._stop.wait(max(0.0, self._interval - (time.monotonic() - started)))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the background thread (waits for a running cycle to finish)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


def _unique(*sources: object) -> list[object]:
    """``sources`` without repeats (one object may be both the device and the allocation source)."""
    return list({id(source): source for source in sources}.values())


def _take_errors(counters: list[ErrorCounting]) -> dict[str, int]:
    """What each counter counted since the previous cycle, added up by source label."""
    merged: dict[str, int] = {}
    for counter in counters:
        try:
            counts = counter.take_errors()
        except Exception:  # a counter's bug must not stop collection
            log.exception("take_errors() failed on %r", counter)
            continue
        for name, count in counts.items():
            merged[name] = merged.get(name, 0) + int(count)
    return merged


def _record_error(span: trace.Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
