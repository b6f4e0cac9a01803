"""Structural schemas of the custom resources the manifests ship, for the kinds Kubernetes' OpenAPI lacks.

Derived by hand from the upstream CustomResourceDefinitions, for the fields gpulens uses, with the
types, patterns and enums upstream declares; every other field is refused, as the API server's strict
field validation (kubectl's default) refuses a field its CRD does not know. A new field or kind in
deploy/ is added here from the upstream CRD of the version named:

- ServiceMonitor, PrometheusRule, AlertmanagerConfig (v1alpha1): prometheus-operator v0.93.0
  (example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,prometheusrules,alertmanagerconfigs}.yaml).

Objects gpulens writes to other systems' CRDs are checked against a trimmed copy of the published schema,
stored with its source commit in ``tests/fixtures``:

- KAI Scheduler Queue (scheduling.run.ai/v2) ``spec``: ``kai_queue_spec.schema.json``, from
  NVIDIA/KAI-Scheduler@72de64fc ``deployments/kai-scheduler/crds/scheduling.run.ai_queues.yaml``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object schema that refuses fields it does not list."""
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


METADATA = closed({"name": {"type": "string", "minLength": 1}, "namespace": {"type": "string"},
                   "labels": STRING_MAP, "annotations": STRING_MAP}, ("name",))

SERVICE_MONITOR_SPEC = closed({
    "selector": closed({"matchLabels": STRING_MAP}),
    "endpoints": {"type": "array", "items": closed({
        "port": {"type": "string"},
        "path": {"type": "string"},
        "scheme": {"type": "string", "enum": ["http", "https", "HTTP", "HTTPS"]},
        "interval": DURATION,
        "scrapeTimeout": DURATION,
        "honorLabels": {"type": "boolean"},
    })},
}, ("endpoints", "selector"))

PROMETHEUS_RULE_SPEC = closed({
    "groups": {"type": "array", "items": closed({
        "name": {"type": "string", "minLength": 1},
        "interval": DURATION,
        "query_offset": DURATION,
        "limit": {"type": "integer"},
        "labels": STRING_MAP,
        # upstream writes ^(?i)(abort|warn)?$, which Python's re refuses (a global flag not at the start)
        "partial_response_strategy": {"type": "string", "pattern": "(?i)^(abort|warn)?$"},
        "rules": {"type": "array", "items": closed({
            "record": {"type": "string"},
            "alert": {"type": "string"},
            "expr": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
            "for": DURATION,
            "keep_firing_for": {**DURATION, "minLength": 1},
            "labels": STRING_MAP,
            "annotations": STRING_MAP,
        }, ("expr",))},
    }, ("name",))},
})

MATCHER = closed({
    "name": {"type": "string", "minLength": 1},
    "matchType": {"type": "string", "enum": ["!=", "=", "=~", "!~"]},
    "value": {"type": "string"},
    "regex": {"type": "boolean"},
}, ("name",))

ROUTE: dict[str, Any] = closed({
    "receiver": {"type": "string"},
    "groupBy": {"type": "array", "items": {"type": "string"}},
    "groupWait": {"type": "string"},
    "groupInterval": {"type": "string"},
    "repeatInterval": {"type": "string"},
    "matchers": {"type": "array", "items": MATCHER},
    "continue": {"type": "boolean"},
})

ALERTMANAGER_CONFIG_SPEC = closed({
    "route": ROUTE,
    "receivers": {"type": "array", "items": closed({
        "name": {"type": "string", "minLength": 1},
        "webhookConfigs": {"type": "array", "items": closed({
            "url": {"type": "string"},
            "sendResolved": {"type": "boolean"},
            "maxAlerts": {"type": "integer", "minimum": 0},
        })},
    }, ("name",))},
})

KAI_QUEUE_SPEC: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "kai_queue_spec.schema.json").read_text(encoding="utf-8"))
"""``spec`` of KAI Scheduler's Queue as published (descriptions dropped, every object closed)."""

SCHEMAS: dict[tuple[str, str], dict[str, Any]] = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICE_MONITOR_SPEC,
    ("monitoring.coreos.com/v1", "PrometheusRule"): PROMETHEUS_RULE_SPEC,
    ("monitoring.coreos.com/v1alpha1", "AlertmanagerConfig"): ALERTMANAGER_CONFIG_SPEC,
}


def validate_custom(obj: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless ``obj`` fits its kind's schema; KeyError for a kind unknown here."""
    spec_schema = SCHEMAS[(obj["apiVersion"], obj["kind"])]
    schema = closed({"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": METADATA,
                     "spec": spec_schema}, ("apiVersion", "kind", "metadata", "spec"))
    jsonschema.validate(obj, schema)
    if obj["kind"] == "PrometheusRule":  # x-kubernetes-list-type: map, keyed by name
        names = [group["name"] for group in obj["spec"].get("groups", [])]
        if len(names) != len(set(names)):
            raise jsonschema.ValidationError(f"PrometheusRule {obj['metadata']['name']}: duplicate group names")
