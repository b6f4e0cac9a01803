"""The remediation service's own metrics: decisions by outcome, alert-to-action time, breaker state, webhooks.

One registry per service (no process-global metrics), served on the service's ``/metrics``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

ACTION_BUCKETS = (1.0, 5.0, 10.0, 15.0, 30.0, 45.0, 60.0, 90.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class ServiceMetrics:
    """Counters and gauges of one :class:`~analytics.remediation.service.RemediationService`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.decisions = Counter(
            "gpulens_remediation_decisions", "Decisions made on alerts, by action and outcome (outcome 'dry-run' "
            "without --apply); a repeated alert that changes nothing is not counted again.",
            ["action", "outcome"], registry=self.registry)
        self.alert_to_action = Histogram(
            "gpulens_remediation_alert_to_action_seconds", "From an alert's startsAt to the quarantine written "
            "(or, in a dry run, decided) for its node.", ["action"], buckets=ACTION_BUCKETS,
            registry=self.registry)
        self.breaker = Gauge(
            "gpulens_remediation_breaker_tripped", "1 while the circuit breaker holds new quarantines of a flavor.",
            ["flavor"], registry=self.registry)
        self.firing = Gauge("gpulens_remediation_firing_alerts", "GPU fault and early-warning alerts firing now.",
                            registry=self.registry)
        self.webhooks = Counter(
            "gpulens_remediation_webhooks", "Webhook requests, by result (ok, bad-payload, unavailable).",
            ["result"], registry=self.registry)
        self.unrecorded = Gauge(
            "gpulens_remediation_unrecorded_decisions", "Decisions not yet written to the store (it was busy); "
            "retried at each evaluation.", registry=self.registry)
        self.last_evaluation = Gauge(
            "gpulens_remediation_last_evaluation_timestamp_seconds", "When the service last decided (Unix time).",
            registry=self.registry)
        self.last_failure = Gauge(
            "gpulens_remediation_evaluation_failed", "1 when the last evaluation failed (store or API server "
            "unreadable): alerts are not acted on.", registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
