"""``start_otel(settings, cycle)``: OTLP export of the exporter's readings (metrics) and cycle spans (traces).

``--otlp-endpoint`` is a base URL as in ``OTEL_EXPORTER_OTLP_ENDPOINT``: over HTTP (default) ``/v1/metrics``
and ``/v1/traces`` are appended; over gRPC it is the collector address. The standard ``OTEL_*`` variables
still apply (``OTEL_METRIC_EXPORT_INTERVAL``, ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_RESOURCE_ATTRIBUTES``,
``OTEL_SERVICE_NAME``, ``OTEL_BSP_*`` ...). The resource carries ``k8s.node.name`` (and ``k8s.pod.name`` /
``k8s.namespace.name`` from ``POD_NAME`` / ``POD_NAMESPACE`` when the Downward API sets them).

Spans: the cycle creates them through the global OpenTelemetry API; this installs an SDK
``TracerProvider`` globally (or, when one is already installed, adds a span processor to it).

Failed exports (the endpoint refuses, is unreachable after the SDK's retries) are counted under ``otlp``:
the handle is :class:`~gpulens.core.device_model.ErrorCounting` and the cycle adds it to ``errors_total``.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from exporter.otel.metrics import register_instruments
from exporter.settings import ExporterSettings, OtlpProtocol
from gpulens.core import __version__
from gpulens.core.device_model import ErrorCounter, ErrorCounting, NodeSnapshot

log = logging.getLogger(__name__)

SERVICE_NAME = "gpulens-exporter"
OTLP_SOURCE = "otlp"
"""``source`` label of failed OTLP exports (metrics or spans)."""


class SnapshotCycle(Protocol):
    def last_snapshot(self) -> NodeSnapshot | None: ...

    def count_errors_of(self, counter: ErrorCounting) -> None: ...


class _CountingMetricExporter(MetricExporter):
    """``inner``, with every failed export counted."""

    def __init__(self, inner: MetricExporter, errors: ErrorCounter) -> None:
        super().__init__(preferred_temporality=inner._preferred_temporality,
                         preferred_aggregation=inner._preferred_aggregation)
        self._inner, self._errors = inner, errors

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        try:
            result = self._inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception:
            self._errors.count(OTLP_SOURCE)
            raise
        if result is not MetricExportResult.SUCCESS:
            self._errors.count(OTLP_SOURCE)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self._inner.shutdown(timeout_millis=timeout_millis, **kwargs)


class _CountingSpanExporter(SpanExporter):
    """``inner``, with every failed export counted."""

    def __init__(self, inner: SpanExporter, errors: ErrorCounter) -> None:
        self._inner, self._errors = inner, errors

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception:
            self._errors.count(OTLP_SOURCE)
            raise
        if result is not SpanExportResult.SUCCESS:
            self._errors.count(OTLP_SOURCE)
        return result

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self._inner.shutdown()


@dataclass
class OtelHandle:
    """Running OTLP export; :meth:`shutdown` flushes and stops it (idempotent)."""

    meter_provider: MeterProvider
    span_processor: BatchSpanProcessor
    tracer_provider: TracerProvider
    errors: ErrorCounter = field(default_factory=ErrorCounter)
    _done: bool = False

    def take_errors(self) -> dict[str, int]:
        """Failed exports since the previous call, under ``otlp`` (:class:`~gpulens.core.device_model.ErrorCounting`)."""
        return self.errors.take_errors()

    def force_flush(self, timeout_millis: int = 10_000) -> None:
        self.span_processor.force_flush(timeout_millis)
        self.meter_provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        if self._done:
            return
        self._done = True
        self.span_processor.force_flush(10_000)
        self.span_processor.shutdown()
        self.meter_provider.shutdown()


def otlp_urls(endpoint: str) -> tuple[str, str]:
    """(metrics URL, traces URL) of an OTLP/HTTP base URL."""
    base = endpoint.rstrip("/")
    return f"{base}/v1/metrics", f"{base}/v1/traces"


def build_resource(settings: ExporterSettings, node: str | None) -> Resource:
    attrs: dict[str, Any] = {"service.name": SERVICE_NAME, "service.version": __version__,
                             "host.name": socket.gethostname()}
    node = settings.node or node or os.environ.get("NODE_NAME")
    if node:
        attrs["k8s.node.name"] = node
    for env, key in (("POD_NAME", "k8s.pod.name"), ("POD_NAMESPACE", "k8s.namespace.name")):
        if os.environ.get(env):
            attrs[key] = os.environ[env]
    return Resource.create(attrs)  # OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME take precedence


def _exporters(settings: ExporterSettings) -> tuple[MetricExporter, SpanExporter]:
    endpoint = settings.otlp_endpoint or ""
    if settings.otlp_protocol is OtlpProtocol.GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans

        insecure = endpoint.startswith("http://") or None
        return GrpcMetrics(endpoint=endpoint, insecure=insecure), GrpcSpans(endpoint=endpoint, insecure=insecure)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    metrics_url, traces_url = otlp_urls(endpoint)
    return OTLPMetricExporter(endpoint=metrics_url), OTLPSpanExporter(endpoint=traces_url)


def start_otel(settings: ExporterSettings, cycle: SnapshotCycle) -> OtelHandle:
    """Start exporting metrics (observable instruments over ``cycle.last_snapshot()``) and spans."""
    resource = build_resource(settings, getattr(cycle, "node", None))
    errors = ErrorCounter()
    metric_exporter, span_exporter = _exporters(settings)
    reader = PeriodicExportingMetricReader(_CountingMetricExporter(metric_exporter, errors))  # interval from OTEL_METRIC_EXPORT_INTERVAL
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    meter = meter_provider.get_meter("gpulens.exporter")

    def errors_total() -> dict[str, int]:
        state = getattr(cycle, "state", None)
        return dict(state().errors_total) if callable(state) else {}

    register_instruments(meter, cycle.last_snapshot, errors_total)
    processor = BatchSpanProcessor(_CountingSpanExporter(span_exporter, errors))
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        current.add_span_processor(processor)
        provider = current
    else:
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(processor)
        trace.set_tracer_provider(provider)
    log.info("OTLP export (%s) to %s", settings.otlp_protocol.value, settings.otlp_endpoint)
    handle = OtelHandle(meter_provider, processor, provider, errors)
    cycle.count_errors_of(handle)
    return handle
