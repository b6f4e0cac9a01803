"""Empty Prometheus metric families built from the metric catalog (name, help, labels spelled once)."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from gpulens.core.metric_catalog import CATALOG, MetricSpec, MetricType

_STATIC: dict[str, tuple[type[GaugeMetricFamily] | type[CounterMetricFamily], str, str, tuple[str, ...]]] = {
    spec.name: (
        CounterMetricFamily if spec.type is MetricType.COUNTER else GaugeMetricFamily,
        spec.family_name, spec.help, spec.labels,
    )
    for spec in CATALOG
}
"""Per catalogued series, what its family is built from (computed once, not per scrape)."""


def new_family(spec: MetricSpec) -> GaugeMetricFamily | CounterMetricFamily:
    """A fresh, empty family for ``spec``: add its samples with ``add_metric(label_values, value)``."""
    cls, name, help_text, labels = _STATIC[spec.name]
    return cls(name, help_text, labels=labels)
