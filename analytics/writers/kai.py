"""KAI Scheduler Queue (scheduling.run.ai/v2): ``spec.resources.gpu.quota``, the queue's deserved GPUs.

``spec.resources`` and its ``gpu`` entry are plain objects in KAI's CRD (granular under server-side apply),
so an apply carries only ``quota``: ``limit``, ``overQuotaWeight``, ``cpu``, ``memory``, ``parentQueue`` and
``priority`` keep their owners. The applier reads the Queue first and sends its ``resourceVersion``.

Guard rails beyond the common ones (:mod:`analytics.writers.apply`): a cut waits while the live
Queue requests more GPUs than it has allocated (``status.requested`` against ``status.allocated``, running
and pending jobs of the queue and its children), and is refused when the Queue reports no
``status.requested``; a queue whose quota is ``-1`` (unlimited) is never given a finite one; a raise above
the queue's ``limit`` (when it sets one above 0) is refused, since KAI would cap the queue at the limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from analytics.quota import QuotaEvidence
from analytics.writers.base import (
    EntryKey,
    QuotaTarget,
    RbacRule,
    format_quantity,
)
from collector.kai_queues import GPU_RESOURCE, UNLIMITED
from collector.queue_systems import KAI_GROUP, KAI_QUEUE, KAI_VERSION
from gpulens.core.kube_api import segment
from gpulens.core.quantity import parse_quantity

ENTRY: EntryKey = ("", GPU_RESOURCE)
NOTES = ("parentQueue", "priority", "overQuotaWeight", "limit", "quota")
"""Store annotations the inventory adds from the Queue's spec (not the Queue's own annotations)."""


def _gpu(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    resources = (obj.get("spec") or {}).get("resources") or {}
    gpu = resources.get("gpu") if isinstance(resources, Mapping) else None
    return gpu if isinstance(gpu, Mapping) else {}


def _status_gpus(obj: Mapping[str, Any], field: str) -> float | None:
    status = obj.get("status")
    listed = status.get(field) if isinstance(status, Mapping) else None
    if not isinstance(listed, Mapping):
        return None
    return next((parse_quantity(v) for k, v in listed.items() if str(k).endswith("/gpu")), 0.0)


class KaiQueueTarget(QuotaTarget):
    """Writes ``spec.resources.gpu.quota`` of KAI Scheduler Queues."""

    name = "kai"
    object_kind = KAI_QUEUE
    api_kind = "Queue"
    rbac = (RbacRule(KAI_GROUP, "queues", ("get", "list", "patch"), cluster_scoped=True),)
    dry_run_note = (
        "# Only spec.resources.gpu.quota is gpulens's: server-side apply keeps limit, overQuotaWeight,\n"
        "# cpu and memory with their owners. `gpulens recommend --apply` reads the live Queue first.\n"
    )
    queues_work = True
    pending_what = "GPU(s) requested beyond the allocation"
    pending_field = "status.requested"

    @property
    def api_version(self) -> str:
        return f"{KAI_GROUP}/{KAI_VERSION}"

    def path(self, namespace: str, name: str) -> str:
        return f"/apis/{KAI_GROUP}/{KAI_VERSION}/queues/{segment(name)}"

    def object_from_snapshot(self, entries: Sequence[QuotaEvidence]) -> dict[str, Any]:
        notes = entries[0].annotations
        gpu: dict[str, Any] = {}
        for e in entries:
            if e.key.resource == GPU_RESOURCE:
                gpu["quota"] = UNLIMITED if notes.get("quota") == "unlimited" else format_quantity(e.nominal or 0)
        for field in ("limit", "overQuotaWeight"):
            if notes.get(field) is not None:
                gpu[field] = format_quantity(float(notes[field]))
        spec: dict[str, Any] = {"resources": {"gpu": gpu}}
        if notes.get("parentQueue"):
            spec["parentQueue"] = notes["parentQueue"]
        obj = self.snapshot_object(entries, spec)
        obj["metadata"]["annotations"] = {k: v for k, v in notes.items() if k not in NOTES}
        return obj

    def current_values(self, obj: Mapping[str, Any]) -> dict[EntryKey, float]:
        quota = _gpu(obj).get("quota", 0)
        return {ENTRY: float(quota)} if isinstance(quota, int | float) and not isinstance(quota, bool) else {}

    def pending_workloads(self, obj: Mapping[str, Any]) -> int | None:
        """GPUs the Queue's jobs request beyond what is allocated (rounded up); None without ``status.requested``."""
        requested = _status_gpus(obj, "requested")
        if requested is None:
            return None
        return max(0, math.ceil(requested - (_status_gpus(obj, "allocated") or 0.0) - 1e-9))

    def entry_refusal(self, obj: Mapping[str, Any], key: EntryKey, value: int) -> str | None:
        gpu = _gpu(obj)
        if gpu.get("quota") == UNLIMITED:
            return "the live Queue's quota is -1 (unlimited): gpulens never sets a finite quota on it"
        limit = gpu.get("limit")
        if isinstance(limit, int | float) and limit > 0 and value > limit:
            return f"{value} is above the Queue's limit {limit:g}: raise spec.resources.gpu.limit first"
        return None

    def owned_spec(self, obj: Mapping[str, Any], values: Mapping[EntryKey, int]) -> dict[str, Any]:
        quota = values.get(ENTRY)
        if quota is None:
            return {"resources": {"gpu": {"quota": _gpu(obj).get("quota", 0)}}}
        return {"resources": {"gpu": {"quota": quota}}}
