"""KAI Scheduler ``Queue`` objects (scheduling.run.ai/v2) as rows of the quota model: quota, limit, usage, pending.

One entry per queue, resource ``nvidia.com/gpu`` and no flavor (KAI queues have none), kind
``Queue.scheduling.run.ai`` (:mod:`collector.queue_systems`). From the Queue (KAI's
``docs/queues/README.md``): ``spec.resources.gpu.quota`` is the nominal quota in GPUs (fractions allowed;
unset or ``0``: nothing guaranteed; ``-1``: unlimited, stored NULL with ``annotations.quota =
"unlimited"``); ``limit`` is the ceiling, stored as ``borrowing_limit = limit - quota`` (``-1``: no limit,
NULL; unset or ``0``: nothing above the quota, 0); ``status.allocated`` and ``status.requested`` (the
key ending in ``/gpu``, as KAI's queue controller reads them) give the usage and the pending quantity
(``requested - allocated``, running and pending jobs of the queue and its children). A Queue without a
status has no usage (not measured). The annotations hold the Queue's own (``gpulens.io/auto-apply`` among
them) and ``parentQueue``, ``priority``, ``overQuotaWeight`` and ``limit`` from its spec. The tenant is the queue's tenant label (as for a ClusterQueue), else its name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from collector.queue_systems import KAI_GROUP, KAI_QUEUE, KAI_VERSION, pending_queue
from gpulens.core.quantity import parse_quantity
from gpulens.core.tenancy.pod_tenancy import cluster_queue_tenant
from gpulens.core.tenancy.rules import TenancyConfig

KAI_QUEUES_PATH = f"/apis/{KAI_GROUP}/{KAI_VERSION}/queues"
GPU_RESOURCE = "nvidia.com/gpu"
UNLIMITED = -1.0


def _gpu_of(resources: Any) -> float | None:
    """The GPU quantity of a status resource list (the key ending in ``/gpu``); None when it has none."""
    if not isinstance(resources, Mapping):
        return None
    for name, value in resources.items():
        if str(name).endswith("/gpu"):
            return parse_quantity(value)
    return None


def _number(value: Any, default: float) -> float | None:
    """A number of the Queue's spec; ``default`` when unset, None when it is not a number."""
    if value is None:
        return default
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def kai_queue_rows(
    queues: list[dict[str, Any]], ts: datetime, source: str, config: TenancyConfig
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``quota_snapshots`` rows and ``pending_demand`` rows of the KAI queues listed."""
    quota_rows: list[dict[str, Any]] = []
    pending_rows: list[dict[str, Any]] = []
    for queue in queues:
        meta = queue.get("metadata") or {}
        spec = queue.get("spec") or {}
        name = str(meta.get("name", ""))
        tenant = cluster_queue_tenant(name, queue, config)
        resources = spec.get("resources")
        gpu = resources.get("gpu") if isinstance(resources, Mapping) else None
        gpu = gpu if isinstance(gpu, Mapping) else {}
        quota = _number(gpu.get("quota"), 0.0)
        limit = _number(gpu.get("limit"), 0.0)
        status = queue.get("status")
        allocated = _gpu_of(status.get("allocated")) if isinstance(status, Mapping) else None
        if allocated is None and isinstance(status, Mapping) and isinstance(status.get("allocated"), Mapping):
            allocated = 0.0  # KAI lists only what is allocated: no GPU key is no GPU
        requested = _gpu_of(status.get("requested")) if isinstance(status, Mapping) else None
        own = meta.get("annotations") or {}
        notes = {
            "parentQueue": spec.get("parentQueue"), "priority": spec.get("priority"),
            "overQuotaWeight": gpu.get("overQuotaWeight"), "limit": gpu.get("limit"),
            "quota": "unlimited" if quota == UNLIMITED else None,
        }
        unlimited_quota = quota is None or quota == UNLIMITED
        quota_rows.append({
            "ts": ts, "object_kind": KAI_QUEUE, "object_namespace": "", "object_name": name, "tenant": tenant,
            "flavor": "", "resource": GPU_RESOURCE,
            "nominal_quota": None if unlimited_quota else quota,
            "borrowing_limit": None if limit is None or limit == UNLIMITED or unlimited_quota
            else max(limit - (quota or 0.0), 0.0),
            "lending_limit": None, "usage": allocated,
            "annotations": json.dumps({**own, **{k: v for k, v in notes.items() if v is not None}}, sort_keys=True),
            "source": source,
        })
        waiting = (requested or 0.0) - (allocated or 0.0)
        if requested is not None and waiting > 0:
            pending_rows.append({
                "ts": ts, "tenant": tenant, "cluster_queue": pending_queue(KAI_QUEUE, name), "namespace": "",
                "flavor": "", "resource": GPU_RESOURCE, "profile": "gpu", "gpu_model": "", "quantity": waiting,
                "workloads": 0, "source": source,  # a quantity, not a count
            })
    return quota_rows, pending_rows
