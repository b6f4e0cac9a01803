"""``GPUQuotaRecommendation`` (gpulens.io/v1alpha1) objects: one per quota object, spec + status."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from analytics.quota import MigConversion, QuotaRecommendation
from gpulens.core.kube_api import segment

CRD_GROUP = "gpulens.io"
CRD_VERSION = "v1alpha1"
CRD_KIND = "GPUQuotaRecommendation"
CRD_PLURAL = "gpuquotarecommendations"


@dataclass(frozen=True)
class RecommendationPolicy:
    """The policy a recommendation was made under (travels in ``spec.policy``)."""

    percentile: float
    headroom: float
    max_step: float
    min_confidence_days: float
    window_days: float
    auto_apply: bool

    def as_spec(self) -> dict[str, Any]:
        return {
            "percentile": round(self.percentile * 100, 3),
            "headroomPercent": round(self.headroom * 100, 3),
            "maxStepPercent": round(self.max_step * 100, 3),
            "minConfidenceDays": self.min_confidence_days,
            "windowDays": self.window_days,
            "autoApply": self.auto_apply,
        }


_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
MAX_NAME = 253
HASH_CHARS = 10


def recommendation_name(kind: str, namespace: str, name: str) -> str:
    """A DNS-1123 subdomain naming one quota object's recommendation, different for every object.

    Valid Kubernetes names map one to one and stay readable: ``<kind>-<name>`` when cluster-scoped,
    ``<kind>-<namespace>.<name>`` when namespaced (a namespace is a DNS label, without dots, so
    ``team-a/gpu-quota`` and ``team/a-gpu-quota`` differ). Anything else (a name Kubernetes would refuse,
    or too long) becomes a cleaned prefix and a hash of the exact (kind, namespace, name).
    """
    readable = f"{kind.lower()}-{namespace}.{name}" if namespace else f"{kind.lower()}-{name}"
    valid = (
        (not namespace or _DNS1123_LABEL.fullmatch(namespace)) and _DNS1123_SUBDOMAIN.fullmatch(name)
        and _DNS1123_SUBDOMAIN.fullmatch(readable) and len(readable) <= MAX_NAME
    )
    if valid:
        return readable
    digest = hashlib.sha256(json.dumps([kind, namespace, name]).encode()).hexdigest()[:HASH_CHARS]
    clean = re.sub(r"[^a-z0-9]+", "-", readable.lower()).strip("-")[: MAX_NAME - HASH_CHARS - 1].rstrip("-")
    return f"{clean or 'quota'}-{digest}"


def rfc3339(ts: datetime) -> str:
    return ts.strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, status: bool | None, reason: str, message: str, now: datetime) -> dict[str, str]:
    return {
        "type": kind,
        "status": "Unknown" if status is None else str(status),
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc3339(now),
    }


def _number(x: float | None) -> float | int | None:
    if x is None:
        return None
    return int(x) if float(x).is_integer() else round(float(x), 4)


def build_recommendation_object(
    *,
    namespace: str,
    target_ref: Mapping[str, str],
    tenant: str,
    recommendations: Sequence[QuotaRecommendation],
    conversions: Sequence[MigConversion],
    policy: RecommendationPolicy,
    window: tuple[datetime, datetime],
    generated_at: datetime,
    applied: tuple[bool | None, str, str] = (False, "DryRun", "not applied: dry run"),
) -> dict[str, Any]:
    """The full object (spec and status) for one quota object's recommendations."""
    resources = []
    for r in recommendations:
        entry: dict[str, Any] = {
            "resource": r.key.resource,
            "action": r.action,
            "usage": _number(r.evidence.usage_now),
            "pending": _number(r.evidence.pending_now),
            "confidence": round(r.confidence.value, 3),
            "reasons": list(r.reasons),
        }
        if r.key.flavor:
            entry["flavor"] = r.key.flavor
        for field, value in (
            ("current", r.current), ("recommended", r.recommended), ("nextStep", r.next_value),
            ("uncappedTarget", r.uncapped_target), ("lowerBound", r.lower_bound), ("upperBound", r.upper_bound),
        ):
            if value is not None:
                entry[field] = value
        resources.append(entry)
    weakest = min(recommendations, key=lambda r: r.confidence.value)
    low = [r for r in recommendations if r.confidence.is_low]
    provided = [r for r in recommendations if r.recommended is not None]
    now = generated_at
    applied_status, applied_reason, applied_message = applied
    status: dict[str, Any] = {
        "generatedAt": rfc3339(generated_at),
        "evidenceWindow": {"start": rfc3339(window[0]), "end": rfc3339(window[1])},
        "confidence": {
            "days": round(weakest.confidence.history_days, 3),
            "samples": weakest.confidence.samples,
            "value": round(weakest.confidence.value, 3),
            "label": weakest.confidence.label,
        },
        "resources": resources,
        "reasons": sorted({reason for r in recommendations for reason in r.reasons[1:]}),
        "conditions": [
            condition(
                "RecommendationProvided", bool(provided),
                "Recommended" if provided else "NotEnoughData",
                f"{len(provided)} of {len(recommendations)} resources have a recommendation", now,
            ),
            condition(
                "LowConfidence", bool(low), "ShortHistory" if low else "EnoughHistory",
                f"confidence {weakest.confidence.value:.1f} days "
                f"({'below' if low else 'at or above'} {policy.min_confidence_days:g})",
                now,
            ),
            condition("Applied", applied_status, applied_reason, applied_message, now),
        ],
    }
    if conversions:
        status["migConversions"] = [
            {
                "gpuModel": c.gpu_model, "profile": c.profile, "resource": c.to_resource,
                "wholeGpus": c.whole_gpus, "migInstances": c.mig_instances, "gpusNeeded": c.gpus_needed,
                "workloads": list(c.workloads),
            }
            for c in conversions
        ]
    return {
        "apiVersion": f"{CRD_GROUP}/{CRD_VERSION}",
        "kind": CRD_KIND,
        "metadata": {
            "name": recommendation_name(target_ref["kind"], target_ref.get("namespace", ""), target_ref["name"]),
            "namespace": namespace,
        },
        "spec": {"targetRef": dict(target_ref), "tenant": tenant, "policy": policy.as_spec()},
        "status": status,
    }


def recommendation_path(namespace: str, name: str, *, status: bool = False) -> str:
    base = f"/apis/{CRD_GROUP}/{CRD_VERSION}/namespaces/{segment(namespace)}/{CRD_PLURAL}/{segment(name)}"
    return f"{base}/status" if status else base
