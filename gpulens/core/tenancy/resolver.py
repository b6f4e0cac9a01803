"""Tenant, queue and owning workload of this node's pods, from the Kubernetes API, cached.

Pods are listed once per refresh with ``fieldSelector=spec.nodeName=<node>`` (scoped to this node); a pod
the kubelet reports but the cache lacks triggers an early refresh (at most once per 2 s). Namespaces,
queues and owner objects come from :class:`ApiTenancyObjects` (cached for ``cache_seconds``); the rules
are :mod:`gpulens.core.tenancy.pod_tenancy`, the same the collector applies. Every lookup failure is
counted and the tenant falls back to the namespace name.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpulens.core.gpu_share import KAI_GPU_GROUP, KAI_RESERVATION_NAMESPACES, GpuShare, pod_gpu_share
from gpulens.core.kube_api import KubernetesReads
from gpulens.core.tenancy.api_objects import ApiTenancyObjects
from gpulens.core.tenancy.pod_tenancy import pod_local_queue, pod_tenant, pod_workload
from gpulens.core.tenancy.rules import TenancyConfig

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_MIN_POD_REFRESH = 2.0


@dataclass(frozen=True)
class PodInfo:
    """What the allocation source needs about one pod."""

    namespace: str
    name: str
    uid: str | None
    tenant: str
    rule: str
    """Which rule answered (``pod_label``, ``kueue``, ... ``namespace``)."""
    queue: str | None = None
    workload_kind: str | None = None
    workload_name: str | None = None
    finished: bool = False
    """The pod's phase is Succeeded or Failed (kubelets before 1.34 still list such pods' devices)."""
    share: GpuShare | None = None
    """The part of each GPU the pod asks for (HAMi, KAI fraction, milli-GPU ...); ``None``: whole devices."""
    gpu_group: str | None = None
    """A KAI reservation pod's GPU group (label ``runai-gpu-group``): the fraction pods its GPU serves."""


class TenantResolver:
    """Resolves (namespace, pod) to :class:`PodInfo` with the configured rules (:mod:`.pod_tenancy`)."""

    def __init__(self, api: KubernetesReads, node: str, config: TenancyConfig | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.node = node
        self.config = config or TenancyConfig()
        self._clock = clock
        self.objects = ApiTenancyObjects(api, self.config, clock=clock)
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._pods_at: float | None = None

    def cached_lookups(self) -> int:
        """Namespaces, queues and owners held in the cache now (bounded by what one TTL sees)."""
        return len(self.objects)

    def take_errors(self) -> Mapping[str, int]:
        """Failed lookups since the previous call, under ``tenants`` (:class:`~gpulens.core.device_model.ErrorCounting`)."""
        return self.objects.take_errors()

    def resolve(self, namespace: str, pod_name: str) -> PodInfo:
        pod = self._pod(namespace, pod_name)
        meta = (pod or {}).get("metadata", {})
        labels: dict[str, str] = meta.get("labels") or {}
        kind, workload = pod_workload(pod, self.objects) if pod else (None, None)
        answer = pod_tenant(namespace, labels, self.objects, self.config)
        phase = (pod or {}).get("status", {}).get("phase")
        return PodInfo(namespace, pod_name, meta.get("uid"), answer.tenant, answer.rule,
                       pod_local_queue(labels, KUEUE_QUEUE_LABEL), kind, workload, finished=phase in ("Succeeded", "Failed"),
                       share=pod_gpu_share(pod) if pod else None,
                       gpu_group=labels.get(KAI_GPU_GROUP) if namespace in KAI_RESERVATION_NAMESPACES else None)

    def gpu_group_members(self, group: str) -> list[tuple[str, str, str]]:
        """(namespace, pod, first container) of this node's fraction pods in KAI GPU group ``group``, as of the
        last pod list (the reservation pod that holds the group's GPU was resolved just before)."""
        members = []
        for (namespace, name), pod in sorted(self._pods.items()):
            labels = (pod.get("metadata") or {}).get("labels") or {}
            if labels.get(KAI_GPU_GROUP) == group and namespace not in KAI_RESERVATION_NAMESPACES:
                containers = (pod.get("spec") or {}).get("containers") or [{}]
                members.append((namespace, name, str(containers[0].get("name", ""))))
        return members

    def _pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        now = self._clock()
        stale = self._pods_at is None or now - self._pods_at >= self.config.pods_refresh_seconds
        missing = (namespace, name) not in self._pods and (
            self._pods_at is None or now - self._pods_at >= _MIN_POD_REFRESH)
        if stale or missing:
            self._refresh_pods(now)
        return self._pods.get((namespace, name))

    def _refresh_pods(self, now: float) -> None:
        self._pods_at = now
        listing = self.objects.get("/api/v1/pods", {"fieldSelector": f"spec.nodeName={self.node}"})
        if listing is None:
            return
        pods = {}
        for item in listing.get("items") or []:
            meta = item.get("metadata", {})
            pods[(meta.get("namespace", ""), meta.get("name", ""))] = item
        self._pods = pods
