"""Helpers to run the exporter's cycle and exposition in tests, deterministically."""

from __future__ import annotations

import itertools
import urllib.request
from collections.abc import Callable

from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from exporter.cycle import CollectionCycle, ExporterState
from exporter.exposition import SnapshotCollector
from exporter.model import Allocation, DeviceReadings
from tests.support.fakes import NODE, FakeAllocationSource, FakeClock, FakeDeviceSource


def fixed_timer(step: float = 0.25) -> Callable[[], float]:
    """A timer that advances by ``step`` on every call: each cycle then lasts exactly ``step`` seconds."""
    ticks = itertools.count()
    return lambda: next(ticks) * step


def fake_cycle(
    readings: DeviceReadings,
    allocations: tuple[Allocation, ...] = (),
    *,
    clock: FakeClock | None = None,
    node: str = NODE,
) -> tuple[CollectionCycle, FakeDeviceSource, FakeAllocationSource]:
    """A CollectionCycle over fakes with a fake clock and a timer that makes every cycle last 0.25 s."""
    devices = FakeDeviceSource(readings)
    allocs = FakeAllocationSource(allocations)
    cycle = CollectionCycle(devices, allocs, node=node, clock=clock or FakeClock(), timer=fixed_timer())
    return cycle, devices, allocs


def render_text(state: ExporterState, backend: str = "sim", version: str = "0.1.0") -> str:
    """The Prometheus text exposition of ``state`` through a fresh registry."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: state, backend=backend, version=version))
    return generate_latest(registry).decode("utf-8")


def http_get(url: str, headers: dict[str, str] | None = None, timeout: float = 10.0,
             context: object | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of a GET, HTTP errors included."""
    request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 - loopback test URL
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:  # type: ignore[arg-type]  # noqa: S310
            return int(resp.status), dict(resp.headers.items()), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), dict(exc.headers.items()), exc.read()
