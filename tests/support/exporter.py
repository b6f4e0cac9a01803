"""Helpers to run the exporter's cycle and exposition in tests, deterministically."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from exporter.cycle import CollectionCycle, ExporterState
from exporter.exposition import SnapshotCollector
from gpulens.core.device_model import Allocation, DeviceReadings
from tests.support.fakes import NODE, FakeAllocationSource, FakeClock, FakeDeviceSource
from tests.support.prometheus import free_port

ROOT = Path(__file__).resolve().parents[2]


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


def start_exporter_process(*args: str, stdout: int = subprocess.PIPE) -> tuple[subprocess.Popen[str], str]:
    """``gpulens exporter <args>`` in a subprocess on a free loopback port: (process, base URL)."""
    port = free_port()
    proc = subprocess.Popen(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "gpulens.cli", "exporter", "--listen", f"127.0.0.1:{port}", *args],
        cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True)
    return proc, f"http://127.0.0.1:{port}"


def wait_healthy(proc: subprocess.Popen[str], url: str, timeout: float = 60.0) -> None:
    """Wait until ``url``/healthz answers 200; fail with the exporter's stderr if it exits first."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            if http_get(url + "/healthz", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"exporter at {url} did not become healthy"
        time.sleep(0.2)


def stop_process(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, then SIGKILL after 20 s; nothing when it already exited."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def running_exporter_process(*args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A healthy ``gpulens exporter <args>`` subprocess, stopped on exit: (process, base URL)."""
    proc, url = start_exporter_process(*args)
    try:
        wait_healthy(proc, url)
        yield proc, url
    finally:
        stop_process(proc)


class SlowCollector:
    """A collector whose render blocks once ``armed``: one /metrics request then holds a slot until
    ``release`` is set (``entered`` says it got there)."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def collect(self):  # type: ignore[no-untyped-def]
        if self.armed:
            self.entered.set()
            self.release.wait(10)
        return iter(())
