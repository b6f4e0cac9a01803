"""Kueue ClusterQueue (v1beta1 and v1beta2): ``spec.resourceGroups[].flavors[].resources[].nominalQuota``.

``resourceGroups`` is an atomic list in Kueue's schema, so an apply must carry the whole list: it is
sent exactly as read, with only ``nominalQuota`` changed. ``borrowingLimit`` and ``lendingLimit`` stay
as they were unless a ratio is configured. The group structure is the same in both API versions (v1beta2
renamed ``cohort`` to ``cohortName``, dropped ``admissionChecks`` and the ``Borrow``/``Preempt``
fungibility values; gpulens writes none of them). ``--apply`` writes the version the cluster serves
(discovered: Kueue v0.20 serves only v1beta2).

A queue whose ``status.effectiveQuotas`` names an ``orchestratorRef`` (Dynamic Quota Orchestration) has its
quotas set by that controller, overriding ``spec.resourceGroups``: gpulens never writes it, and says what it
would have recommended.
"""

from __future__ import annotations

import copy
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from analytics.quota import QuotaEvidence
from analytics.writers.base import (
    EntryKey,
    QuotaTarget,
    RbacRule,
    format_quantity,
    is_device_resource,
    parse_quantity,
)
from collector.kueue_api import effective_quotas, served_kueue
from gpulens.core.kube_api import KubernetesReads, segment

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta1", "v1beta2")
ORCHESTRATOR_NOTE = "orchestrator"
"""The store's annotation (``quota_snapshots.annotations``) naming a queue's quota orchestrator."""


class ClusterQueueTarget(QuotaTarget):
    """Writes ``nominalQuota`` of a ClusterQueue's flavors."""

    name = "kueue"
    object_kind = "ClusterQueue"
    rbac = (RbacRule(KUEUE_GROUP, "clusterqueues", ("get", "list", "patch"), cluster_scoped=True),)
    dry_run_note = (
        "# resourceGroups is an atomic list: this body was rebuilt from the store (GPU resources only).\n"
        "# `gpulens recommend --apply` rebuilds it from the live object; applying this file by hand\n"
        "# replaces every resource group of the queue.\n"
    )

    queues_work = True

    def __init__(
        self,
        version: str = "v1beta2",
        *,
        borrowing_limit_ratio: float | None = None,
        lending_limit_ratio: float | None = None,
    ) -> None:
        if version not in KUEUE_VERSIONS:
            raise ValueError(f"unsupported Kueue API version {version!r} (supported: {', '.join(KUEUE_VERSIONS)})")
        self.version = version
        self.borrowing_limit_ratio = borrowing_limit_ratio
        self.lending_limit_ratio = lending_limit_ratio

    @property
    def api_version(self) -> str:
        return f"{KUEUE_GROUP}/{self.version}"

    def served(self, api: KubernetesReads) -> tuple[QuotaTarget, str | None]:
        kueue = served_kueue(api, self.version)
        if kueue.version is None or kueue.version == self.version:
            return self, kueue.statement
        other = copy.copy(self)
        other.version = kueue.version
        return other, kueue.statement

    def managed_by(self, obj: Mapping[str, Any]) -> str | None:
        effective = effective_quotas(obj)
        return effective.orchestrator if effective else None

    def path(self, namespace: str, name: str) -> str:
        return f"/apis/{KUEUE_GROUP}/{self.version}/clusterqueues/{segment(name)}"

    def object_from_snapshot(self, entries: Sequence[QuotaEvidence]) -> dict[str, Any]:
        """One resource group per distinct set of resources; flavors keep the store's order."""
        per_flavor: dict[str, list[QuotaEvidence]] = defaultdict(list)
        for e in entries:
            per_flavor[e.key.flavor].append(e)
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = defaultdict(list)
        for flavor, items in per_flavor.items():
            items.sort(key=lambda e: e.key.resource)
            covered = tuple(e.key.resource for e in items)
            groups[covered].append({"name": flavor, "resources": [_resource(e) for e in items]})
        obj = self.snapshot_object(entries, {
            "resourceGroups": [
                {"coveredResources": list(covered), "flavors": flavors} for covered, flavors in groups.items()
            ]
        })
        orchestrator = entries[0].annotations.get(ORCHESTRATOR_NOTE)
        if orchestrator:  # the inventory saw status.effectiveQuotas
            obj["status"] = {"effectiveQuotas": {"orchestratorRef": orchestrator}}
        return obj

    def current_values(self, obj: Mapping[str, Any]) -> dict[EntryKey, float]:
        out = {}
        for group in obj.get("spec", {}).get("resourceGroups", []):
            for flavor in group.get("flavors", []):
                for res in flavor.get("resources", []):
                    if is_device_resource(res["name"]):
                        out[(flavor["name"], res["name"])] = parse_quantity(res.get("nominalQuota", 0))
        return out

    def pending_workloads(self, obj: Mapping[str, Any]) -> int | None:
        """``status.pendingWorkloads``: Kueue's count of workloads waiting for admission to this queue."""
        status = obj.get("status")
        value = status.get("pendingWorkloads") if isinstance(status, Mapping) else None
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            return None
        return int(value)

    def owned_spec(self, obj: Mapping[str, Any], values: Mapping[EntryKey, int]) -> dict[str, Any]:
        groups = obj.get("spec", {}).get("resourceGroups", [])
        for group in groups:
            for flavor in group.get("flavors", []):
                for res in flavor.get("resources", []):
                    new = values.get((flavor["name"], res["name"]))
                    if new is None:
                        continue
                    res["nominalQuota"] = new
                    if self.borrowing_limit_ratio is not None:
                        res["borrowingLimit"] = math.ceil(new * self.borrowing_limit_ratio)
                    if self.lending_limit_ratio is not None:
                        res["lendingLimit"] = math.floor(new * self.lending_limit_ratio)
        return {"resourceGroups": groups}


def _resource(e: QuotaEvidence) -> dict[str, Any]:
    out: dict[str, Any] = {"name": e.key.resource, "nominalQuota": format_quantity(e.nominal or 0)}
    if e.borrowing_limit is not None:
        out["borrowingLimit"] = format_quantity(e.borrowing_limit)
    if e.lending_limit is not None:
        out["lendingLimit"] = format_quantity(e.lending_limit)
    return out
