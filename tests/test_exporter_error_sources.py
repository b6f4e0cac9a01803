"""Every source that counts its own partial failures does so through one protocol (``ErrorCounting``), and
what each counts arrives in ``gpulens_exporter_errors_total{source=...}``: NVML's unexpected answers, failed
tenant lookups, unresolvable DRA claims and failed OTLP exports, next to the cycle's own ``devices`` and
``kubelet`` counts."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pynvml
import pytest

from exporter.allocations import KubeletAllocationSource
from exporter.cycle import CollectionCycle
from exporter.kubelet.client import PodResourcesClient
from exporter.kubelet.dra import ResourceSliceDirectory
from exporter.nvml.source import NvmlDeviceSource
from exporter.otel.setup import start_otel
from exporter.settings import ExporterSettings
from gpulens.core.device_model import ErrorCounting
from gpulens.core.kube_api import KubernetesClient
from gpulens.core.tenancy.resolver import TenantResolver
from gpulens.sim.fleet import SimulatedFleet
from gpulens.sim.scenario_file import load_scenario
from tests.fakes.kubelet import FakeKubelet, container, dra_claim, pod
from tests.fakes.kubernetes_api import ANY, FakeKubernetesApi
from tests.fakes.nvml import FakeNvml, nvml_error
from tests.fakes.nvml_captures import H100_NO_MIG, load_capture
from tests.support.exporter import render_text
from tests.support.fakes import FakeAllocationSource, FakeClock, FakeDeviceSource, every_family_readings

NODE = "node-a"
H100 = "GPU-33333333-0000-0000-0000-000000000003"


class FlakyPowerNvml(FakeNvml):
    """A fake NVML whose power reading answers ``Unknown`` (neither absent nor a lost GPU) while ``flaky``."""

    flaky = False

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:  # noqa: N802 - NVML's name
        if self.flaky:
            raise nvml_error(pynvml.NVML_ERROR_UNKNOWN)
        return super().nvmlDeviceGetPowerUsage(handle)  # type: ignore[arg-type]


def errors_series(text: str) -> dict[str, float]:
    """``source`` -> value of every ``gpulens_exporter_errors_total`` sample in an exposition."""
    pattern = r'gpulens_exporter_errors_total\{node="[^"]*",source="([^"]+)"\} ([0-9.]+)'
    return {source: float(value) for source, value in re.findall(pattern, text)}


@pytest.fixture
def refusing_otlp_endpoint() -> Iterator[str]:
    """An OTLP/HTTP endpoint that refuses every export with 400 (not retried by the SDK)."""

    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server naming
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/otlp"
    server.shutdown()
    server.server_close()


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[FakeKubelet]:
    with FakeKubelet(tmp_path) as k:
        yield k


def test_nvml_unexpected_answers_tenant_lookups_and_dra_claims_each_arrive_under_their_source(
        kubelet: FakeKubelet) -> None:
    nvml = FlakyPowerNvml([load_capture(H100_NO_MIG, uuid=H100)])
    devices = NvmlDeviceSource(nvml, NODE, watch_xids=False)
    with FakeKubernetesApi() as api:
        api.fail("GET", ANY, 500, "etcd is unhappy", times=None)  # every lookup and every slice list fails
        kubelet.pods = [pod("team-a", "trainer", [container("c", "nvidia.com/gpu", [H100])]),
                        pod("team-b", "dra", [container("c", claims=[dra_claim("gpu", "team-b", NODE, "gpu-0")])])]
        client = KubernetesClient(api.url, timeout_s=5)
        allocations = KubeletAllocationSource(
            PodResourcesClient(str(kubelet.socket), timeout_seconds=2), directory=lambda: devices.directory,
            tenants=TenantResolver(client, NODE), slices=ResourceSliceDirectory(client, NODE))
        cycle = CollectionCycle(devices, allocations, node=NODE, clock=lambda: nvml.now)
        first = errors_series(render_text(cycle.run_once()))
        nvml.flaky = True
        nvml.advance(5.0)
        second = errors_series(render_text(cycle.run_once()))
        client.close()
    devices.close()
    assert first["tenants"] >= 1 and first["dra"] >= 1, first
    assert first.get("nvml", 0) == 0 and first["devices"] == 0 and first["kubelet"] == 0, first
    assert second["nvml"] == 1, "one GPU, one unexpected power answer in the second cycle"
    assert second["devices"] == 0, "an unexpected answer is not a failed device read"
    assert second["tenants"] >= first["tenants"], "a counter never goes down"


def test_failed_otlp_exports_arrive_under_otlp(monkeypatch: pytest.MonkeyPatch, refusing_otlp_endpoint: str) -> None:
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "100000")  # only the flush exports
    readings = every_family_readings()
    cycle = CollectionCycle(FakeDeviceSource(readings), FakeAllocationSource(()), node=readings.node,
                            clock=FakeClock())
    handle = start_otel(ExporterSettings(otlp_endpoint=refusing_otlp_endpoint, node=readings.node), cycle)
    try:
        assert cycle.run_once().errors_total.get("otlp", 0) == 0, "nothing exported yet"
        handle.force_flush(5_000)
        state = cycle.run_once()
    finally:
        handle.shutdown()
    assert state.errors_total["otlp"] >= 1
    assert errors_series(render_text(state))["otlp"] == state.errors_total["otlp"]


def test_the_sources_that_count_say_so_through_the_protocol_and_the_simulator_does_not(tmp_path: Path) -> None:
    nvml = FakeNvml([load_capture(H100_NO_MIG, uuid=H100)])
    devices = NvmlDeviceSource(nvml, NODE, watch_xids=False)
    with FakeKubernetesApi() as api:
        client = KubernetesClient(api.url)
        counting = [devices, KubeletAllocationSource(PodResourcesClient(f"unix://{tmp_path}/k.sock")),
                    TenantResolver(client, NODE), ResourceSliceDirectory(client, NODE)]
        assert all(isinstance(s, ErrorCounting) for s in counting)
        assert [s.take_errors() for s in counting] == [{}, {}, {}, {}], "nothing failed: nothing counted"
        client.close()
    devices.close()
    fleet = SimulatedFleet(load_scenario(None))
    assert not isinstance(fleet.source(fleet.node_names()[0]), ErrorCounting)
