"""What the writer would do to one quota object: the changes, the apply body, a readable diff."""

from __future__ import annotations

import difflib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import yaml

from analytics.quota import MigConversion, QuotaRecommendation
from analytics.writers.base import (
    AUDIT_AT,
    AUDIT_FROM,
    AUDIT_RECOMMENDATION,
    AUDIT_TO,
    AUTO_APPLY_ANNOTATION,
    EntryKey,
    QuotaTarget,
    format_quantity,
    printable,
)
from analytics.writers.crd import (
    RecommendationPolicy,
    build_recommendation_object,
    recommendation_name,
    rfc3339,
)


def dump_yaml(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)


def entry_label(key: EntryKey) -> str:
    flavor, resource = key
    return f"{flavor}/{resource}" if flavor else resource


def opted_out(annotations: Mapping[str, Any] | None) -> bool:
    """True when the object carries ``gpulens.io/auto-apply: "false"``."""
    return str((annotations or {}).get(AUTO_APPLY_ANNOTATION, "")).strip().lower() == "false"


@dataclass(frozen=True)
class ObjectPlan:
    """The recommendations for one quota object and how they would be written."""

    target: QuotaTarget
    namespace: str
    name: str
    tenant: str
    recommendations: tuple[QuotaRecommendation, ...]
    conversions: tuple[MigConversion, ...]
    snapshot: Mapping[str, Any]
    """The object as the store last saw it."""
    record_namespace: str
    run_id: str

    @property
    def ref(self) -> str:
        """``Kind namespace/name`` on one line (names from the store are data: control characters escaped)."""
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.target.object_kind} {printable(where + self.name)}"

    @property
    def target_ref(self) -> dict[str, str]:
        ref = {"apiVersion": self.target.api_version, "kind": self.target.kind, "name": self.name}
        if self.namespace:
            ref["namespace"] = self.namespace
        return ref

    @property
    def recommendation_name(self) -> str:
        return recommendation_name(self.target.object_kind, self.namespace, self.name)

    @property
    def changes(self) -> tuple[QuotaRecommendation, ...]:
        return tuple(r for r in self.recommendations if r.changes)

    @property
    def applicable(self) -> tuple[QuotaRecommendation, ...]:
        """Changes confident enough to apply."""
        return tuple(r for r in self.changes if not r.confidence.is_low)

    @property
    def refused(self) -> tuple[QuotaRecommendation, ...]:
        return tuple(r for r in self.changes if r.confidence.is_low)

    @property
    def opted_out(self) -> bool:
        return opted_out(self.snapshot.get("metadata", {}).get("annotations"))

    def managed_refusal(self, obj: Mapping[str, Any] | None = None) -> str | None:
        """Why ``obj`` (default: the snapshot) is not ours to write, with what would have been written; None
        when no orchestrator manages its quotas."""
        orchestrator = self.target.managed_by(self.snapshot if obj is None else obj)
        if orchestrator is None:
            return None
        would = ", ".join(f"{entry_label((r.key.flavor, r.key.resource))} {format_quantity(r.current or 0)} -> "
                          f"{r.next_value}" for r in self.changes) or "no change"
        return f"managed by {orchestrator}; the recommendation would be {would}"

    @property
    def writable(self) -> bool:
        """Whether a dry run writes this object's apply body: confident changes, not opted out, not managed."""
        return bool(self.applicable) and not self.opted_out and self.managed_refusal() is None

    def audit_annotations(
        self, before: Mapping[EntryKey, float], after: Mapping[EntryKey, int], when: datetime
    ) -> dict[str, str]:
        return {
            AUDIT_FROM: json.dumps({entry_label(k): format_quantity(before.get(k, 0)) for k in sorted(after)}),
            AUDIT_TO: json.dumps({entry_label(k): v for k, v in sorted(after.items())}),
            AUDIT_AT: rfc3339(when),
            AUDIT_RECOMMENDATION: f"{self.record_namespace}/{self.recommendation_name} (run {self.run_id})",
        }

    def body(
        self,
        when: datetime,
        obj: Mapping[str, Any] | None = None,
        recommendations: Iterable[QuotaRecommendation] | None = None,
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """The apply body for ``recommendations`` (default: the applicable changes) on ``obj`` (default: snapshot)."""
        base = self.snapshot if obj is None else obj
        recs = self.applicable if recommendations is None else tuple(recommendations)
        after = {(r.key.flavor, r.key.resource): int(r.next_value) for r in recs if r.next_value is not None}
        before = self.target.current_values(base)
        annotations = self.audit_annotations(before, after, when)
        return self.target.apply_body(base, after, annotations, resource_version=resource_version)

    def diff(self, when: datetime) -> str:
        """Unified diff of the owned spec, as stored vs as it would be applied."""
        now = self.target.current_values(self.snapshot)
        keys = [(r.key.flavor, r.key.resource) for r in self.applicable]
        unchanged = {k: int(now[k]) for k in keys if k in now}
        before = dump_yaml({"spec": self.target.owned_spec(_copy(self.snapshot), unchanged)}).splitlines()
        after = dump_yaml({"spec": self.body(when)["spec"]}).splitlines()
        return "\n".join(
            difflib.unified_diff(before, after, fromfile=f"{self.ref} (now)", tofile=f"{self.ref} (proposed)",
                                 lineterm="")
        )

    def recommendation_object(
        self,
        policy: RecommendationPolicy,
        window: tuple[datetime, datetime],
        generated_at: datetime,
        applied: tuple[bool | None, str, str] = (False, "DryRun", "not applied: dry run"),
    ) -> dict[str, Any]:
        return build_recommendation_object(
            namespace=self.record_namespace, target_ref=self.target_ref, tenant=self.tenant,
            recommendations=self.recommendations, conversions=self.conversions, policy=policy, window=window,
            generated_at=generated_at, applied=applied,
        )


def _copy(obj: Mapping[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(obj))


def build_plans(
    recommendations: Sequence[QuotaRecommendation],
    conversions: Sequence[MigConversion],
    targets: Mapping[str, QuotaTarget],
    *,
    record_namespace: str,
    run_id: str,
) -> list[ObjectPlan]:
    """One plan per quota object whose kind has a target in ``targets`` (keyed by object kind)."""
    per_object: dict[tuple[str, str, str], list[QuotaRecommendation]] = defaultdict(list)
    for r in recommendations:
        if r.key.object_kind in targets:
            per_object[r.key.object_id].append(r)
    plans: list[ObjectPlan] = []
    for (kind, ns, name), recs in sorted(per_object.items()):
        target = targets[kind]
        tenant = recs[0].evidence.tenant
        plans.append(
            ObjectPlan(
                target=target, namespace=ns, name=name, tenant=tenant, recommendations=tuple(recs),
                conversions=tuple(c for c in conversions if c.queue is not None and c.queue.object_id == (kind, ns, name)),
                snapshot=target.object_from_snapshot([r.evidence for r in recs]),
                record_namespace=record_namespace, run_id=run_id,
            )
        )
    _check_unique_names(plans)
    return plans


def _check_unique_names(plans: Sequence[ObjectPlan]) -> None:
    """Two objects must never share a recommendation (or dry-run file): one would overwrite the other."""
    seen: dict[str, ObjectPlan] = {}
    for plan in plans:
        other = seen.setdefault(plan.recommendation_name, plan)
        if other is not plan:
            raise ValueError(f"{other.ref} and {plan.ref} would share the recommendation name "
                             f"{plan.recommendation_name!r}; rename one of them")
