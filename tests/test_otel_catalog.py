"""The OTel instruments are the metric catalog's: every catalogued OTel name, unit and description, no other."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from exporter.otel.metrics import register_instruments
from gpulens.core.metric_catalog import CATALOG
from tests.support.exporter import fake_cycle
from tests.support.fakes import every_family_allocations, every_family_readings


def exported() -> dict[str, tuple[str, str]]:
    """OTel metric name -> (unit, description) of one collection over a snapshot using every family."""
    cycle, _, _ = fake_cycle(every_family_readings(), every_family_allocations())
    state = cycle.run_once()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    register_instruments(provider.get_meter("test"), lambda: state.snapshot, lambda: {"kubelet": 1})
    data = reader.get_metrics_data()
    provider.shutdown()
    assert data is not None
    return {m.name: (m.unit or "", m.description or "")
            for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


def test_every_catalogued_otel_instrument_is_exported_with_its_unit_and_description() -> None:
    expected = {spec.otel.name: (spec.otel.unit, spec.otel_description) for spec in CATALOG if spec.otel}
    assert len(expected) == 12
    assert exported() == expected
