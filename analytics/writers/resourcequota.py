"""Core ResourceQuota: ``spec.hard["requests.nvidia.com/gpu"]`` and ``requests.nvidia.com/mig-<profile>``.

``spec.hard`` is a map, so an apply carries only the keys gpulens recommends; other keys keep their
owners. Extended resources are only allowed with the ``requests.`` prefix in a quota.
"""

from __future__ import annotations

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
from gpulens.core.kube_api import segment

REQUESTS_PREFIX = "requests."


def hard_key(resource: str) -> str:
    return resource if resource.startswith(REQUESTS_PREFIX) else f"{REQUESTS_PREFIX}{resource}"


class ResourceQuotaTarget(QuotaTarget):
    """Writes GPU and MIG request quotas of a namespace's ResourceQuota."""

    name = "resourcequota"
    object_kind = "ResourceQuota"
    rbac = (RbacRule("", "resourcequotas", ("get", "list", "patch"), cluster_scoped=False),)

    @property
    def api_version(self) -> str:
        return "v1"

    def path(self, namespace: str, name: str) -> str:
        return f"/api/v1/namespaces/{segment(namespace)}/resourcequotas/{segment(name)}"

    def object_from_snapshot(self, entries: Sequence[QuotaEvidence]) -> dict[str, Any]:
        return self.snapshot_object(
            entries, {"hard": {hard_key(e.key.resource): str(format_quantity(e.nominal or 0)) for e in entries}})

    def current_values(self, obj: Mapping[str, Any]) -> dict[EntryKey, float]:
        hard = obj.get("spec", {}).get("hard", {}) or {}
        return {
            ("", k.removeprefix(REQUESTS_PREFIX)): parse_quantity(v)
            for k, v in hard.items()
            if k.startswith(REQUESTS_PREFIX) and is_device_resource(k)
        }

    def owned_spec(self, obj: Mapping[str, Any], values: Mapping[EntryKey, int]) -> dict[str, Any]:
        return {"hard": {hard_key(resource): str(v) for (_, resource), v in sorted(values.items())}}
