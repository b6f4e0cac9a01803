"""OTLP/HTTP export received on a local endpoint and decoded with the OpenTelemetry protobufs."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from exporter.allocations import KubeletAllocationSource
from exporter.cycle import CollectionCycle
from exporter.kubelet.client import PodResourcesClient
from exporter.nvml.source import NvmlDeviceSource
from exporter.otel.setup import otlp_urls, start_otel
from exporter.settings import ExporterSettings
from gpulens.core.kube_api import KubernetesClient
from gpulens.core.tenancy.resolver import TenantResolver
from tests.fakes.kubelet import FakeKubelet, container, pod
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.fakes.nvml import FakeNvml
from tests.fakes.nvml_captures import H200_MIG, load_capture

NODE = "gpu-node-7"


class OtlpReceiver:
    """A local OTLP/HTTP endpoint that keeps every decoded request."""

    def __init__(self) -> None:
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.traces: list[ExportTraceServiceRequest] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/otlp/v1/metrics":
                    receiver.metrics.append(ExportMetricsServiceRequest.FromString(body))
                elif self.path == "/otlp/v1/traces":
                    receiver.traces.append(ExportTraceServiceRequest.FromString(body))
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/otlp"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver()
    yield r
    r.close()


def test_metrics_and_cycle_spans_arrive_over_otlp_http(receiver: OtlpReceiver, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "100000")  # only the flush at shutdown exports
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.cluster.name=lab")
    fake = FakeNvml([load_capture(H200_MIG)])
    mig = fake.gpus[0].migs[3].uuid
    devices = NvmlDeviceSource(fake, NODE, watch_xids=False)
    with FakeKubelet(tmp_path) as kubelet, FakeKubernetesApi() as api:
        api.add_pod("vision", "infer-0", NODE, labels={"gpulens.io/tenant": "vision-team"})
        kubelet.pods = [pod("vision", "infer-0", [container("c", "nvidia.com/mig-1g.18gb", [mig])])]
        allocations = KubeletAllocationSource(
            PodResourcesClient(str(kubelet.socket)), directory=lambda: devices.directory,
            tenants=TenantResolver(KubernetesClient(api.url), NODE))
        cycle = CollectionCycle(devices, allocations, node=NODE, clock=lambda: fake.now)
        handle = start_otel(ExporterSettings(otlp_endpoint=receiver.url, node=NODE), cycle)
        try:
            cycle.run_once()
            fake.advance(5.0)
            cycle.run_once()
        finally:
            handle.shutdown()
            devices.close()

    points: dict[str, list[tuple[float, dict[str, Any]]]] = {}
    resource_attrs: dict[str, Any] = {}
    for request in receiver.metrics:
        for rm in request.resource_metrics:
            resource_attrs.update({kv.key: kv.value.string_value for kv in rm.resource.attributes})
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    data = getattr(metric, metric.WhichOneof("data"))
                    for p in data.data_points:
                        value = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                        attrs = {kv.key: getattr(kv.value, kv.value.WhichOneof("value")) for kv in p.attributes}
                        points.setdefault(metric.name, []).append((value, attrs))
    assert resource_attrs["k8s.node.name"] == NODE and resource_attrs["k8s.cluster.name"] == "lab"
    assert resource_attrs["service.name"] == "gpulens-exporter"
    for name in ("hw.gpu.memory.usage", "hw.gpu.memory.limit", "hw.power", "hw.temperature", "hw.status",
                 "hw.gpu.utilization", "gpulens.allocation.gpu_equivalents"):
        assert name in points, f"{name} missing from OTLP metrics"
    (share, alloc_attrs), = points["gpulens.allocation.gpu_equivalents"]
    assert share == pytest.approx(1 / 7)
    assert alloc_attrs["k8s.pod.name"] == "infer-0" and alloc_attrs["gpulens.tenant"] == "vision-team"
    limits = {a["hw.id"]: v for v, a in points["hw.gpu.memory.limit"]}
    assert len(limits) == 4, "memory once per GPU instance: 5 MIG devices, GI 2 split in two CIs"
    assert all(a.get("hw.parent") for _, a in points["hw.gpu.utilization"])

    spans = [s for r in receiver.traces for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
    by_id = {s.span_id: s for s in spans}
    cycles = [s for s in spans if s.name == "gpulens.collect_cycle"]
    assert len(cycles) == 2
    children = {s.name for s in spans if s.parent_span_id in {c.span_id for c in cycles}}
    assert {"gpulens.read_devices", "gpulens.read_allocations"} <= children
    tenant_spans = [s for s in spans if s.name == "gpulens.resolve_tenants"]
    assert tenant_spans and all(by_id[s.parent_span_id].name == "gpulens.read_allocations" for s in tenant_spans)
    assert any(s.name == "gpulens.kubelet_list" for s in spans)


def test_the_endpoint_is_a_base_url() -> None:
    assert otlp_urls("http://collector:4318/") == ("http://collector:4318/v1/metrics",
                                                   "http://collector:4318/v1/traces")


def test_otlp_grpc_delivers_metrics_and_spans_to_a_grpc_collector(tmp_path: Path) -> None:
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    from exporter.settings import OtlpProtocol
    from tests.support.fakes import FakeAllocationSource, FakeDeviceSource, every_family_readings

    received: dict[str, list[Any]] = {"metrics": [], "spans": []}

    class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802
            received["metrics"].append(request)
            return metrics_service_pb2.ExportMetricsServiceResponse()

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802
            received["spans"].append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), server)
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        readings = every_family_readings()
        cycle = CollectionCycle(FakeDeviceSource(readings), FakeAllocationSource(()), node=readings.node)
        settings = ExporterSettings(otlp_endpoint=f"http://127.0.0.1:{port}", otlp_protocol=OtlpProtocol.GRPC)
        handle = start_otel(settings, cycle)
        cycle.run_once()
        handle.shutdown()
    finally:
        server.stop(grace=0)
    names = {m.name for r in received["metrics"] for rm in r.resource_metrics for sm in rm.scope_metrics
             for m in sm.metrics}
    assert {"hw.power", "hw.gpu.memory.limit", "hw.status"} <= names
    span_names = {s.name for r in received["spans"] for rs in r.resource_spans for ss in rs.scope_spans
                  for s in ss.spans}
    assert "gpulens.collect_cycle" in span_names
