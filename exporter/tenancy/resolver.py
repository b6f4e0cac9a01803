"""Tenant, queue and owning workload of this node's pods, from the Kubernetes API, cached.

Pods are listed once per refresh with ``fieldSelector=spec.nodeName=<node>`` (scoped to this node); a pod
the kubelet reports but the cache lacks triggers an early refresh (at most once per 2 s). Namespaces,
LocalQueues and owner objects are cached for ``cache_seconds`` (failures too, so a broken API server is
not hammered). Every lookup failure is counted and the tenant falls back to the namespace name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpulens.exporter.kube_api import KubernetesApi, KubernetesApiError, segment
from gpulens.exporter.tenancy.rules import RuleKind, TenancyConfig

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


class _TtlCache:
    """Values loaded at most once per ``ttl``; expired entries are swept once per ``ttl``, so objects
    that went away (finished Jobs, deleted namespaces) do not pile up over the exporter's lifetime."""

    def __init__(self, ttl: float, clock: Callable[[], float]) -> None:
        self._ttl, self._clock = ttl, clock
        self._items: dict[Any, tuple[float, Any]] = {}
        self._swept_at: float | None = None

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Any, load: Callable[[], Any]) -> Any:
        hit = self._items.get(key)
        now = self._clock()
        if hit is not None and now - hit[0] < self._ttl:
            return hit[1]
        if self._swept_at is None or now - self._swept_at >= self._ttl:
            self._swept_at = now
            self._items = {k: v for k, v in self._items.items() if now - v[0] < self._ttl}
        value = load()
        self._items[key] = (now, value)
        return value


class TenantResolver:
    """Resolves (namespace, pod) to :class:`PodInfo` with the configured rules."""

    def __init__(self, api: KubernetesApi, node: str, config: TenancyConfig | None = None, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.node = node
        self.config = config or TenancyConfig()
        self._clock = clock
        self._cache = _TtlCache(self.config.cache_seconds, clock)
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._pods_at: float | None = None
        self.errors = 0

    def cached_lookups(self) -> int:
        """Namespaces, LocalQueues and owners held in the cache now (bounded by what one TTL sees)."""
        return len(self._cache)

    def take_errors(self) -> int:
        count, self.errors = self.errors, 0
        return count

    def resolve(self, namespace: str, pod_name: str) -> PodInfo:
        pod = self._pod(namespace, pod_name)
        meta = (pod or {}).get("metadata", {})
        labels: dict[str, str] = meta.get("labels") or {}
        queue = labels.get(KUEUE_QUEUE_LABEL)
        kind, workload = self._workload(namespace, pod_name, meta) if pod else (None, None)
        tenant, rule = self._tenant(namespace, labels, queue)
        phase = (pod or {}).get("status", {}).get("phase")
        return PodInfo(namespace, pod_name, meta.get("uid"), tenant, rule, queue, kind, workload,
                       finished=phase in ("Succeeded", "Failed"))

    # -- rules -----------------------------------------------------------------------------------------

    def _tenant(self, namespace: str, labels: dict[str, str], queue: str | None) -> tuple[str, str]:
        ns_labels: dict[str, str] | None = None
        for rule in self.config.rules:
            value: str | None = None
            if rule.kind in (RuleKind.POD_LABEL, RuleKind.VCLUSTER):
                value = labels.get(rule.label)
            elif rule.kind is RuleKind.KUEUE:
                name = labels.get(rule.label) if rule.key else queue
                value = self._cluster_queue(namespace, name) if name else None
            elif rule.kind in (RuleKind.CAPSULE, RuleKind.NAMESPACE_LABEL):
                if ns_labels is None:
                    ns_labels = self._namespace_labels(namespace)
                value = ns_labels.get(rule.label)
            elif rule.kind is RuleKind.NAMESPACE:
                value = namespace
            if value:
                return value, rule.kind.value
        return namespace, RuleKind.NAMESPACE.value

    def _cluster_queue(self, namespace: str, local_queue: str) -> str | None:
        version = self.config.kueue_api_version
        path = f"/apis/kueue.x-k8s.io/{version}/namespaces/{segment(namespace)}/localqueues/{segment(local_queue)}"
        obj = self._cache.get(("lq", namespace, local_queue), lambda: self._get(path))
        return (obj or {}).get("spec", {}).get("clusterQueue")

    def _namespace_labels(self, namespace: str) -> dict[str, str]:
        obj = self._cache.get(("ns", namespace), lambda: self._get(f"/api/v1/namespaces/{segment(namespace)}"))
        return dict((obj or {}).get("metadata", {}).get("labels") or {})

    # -- pods and owners -------------------------------------------------------------------------------

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
        listing = self._get("/api/v1/pods", {"fieldSelector": f"spec.nodeName={self.node}"})
        if listing is None:
            return
        pods = {}
        for item in listing.get("items") or []:
            meta = item.get("metadata", {})
            pods[(meta.get("namespace", ""), meta.get("name", ""))] = item
        self._pods = pods

    def _workload(self, namespace: str, pod_name: str, meta: dict[str, Any]) -> tuple[str, str]:
        owner = _controller(meta)
        if owner is None:
            return "Pod", pod_name
        kind, name = owner
        where = f"namespaces/{segment(namespace)}"
        parent_paths = {"ReplicaSet": f"/apis/apps/v1/{where}/replicasets/{segment(name)}",
                        "Job": f"/apis/batch/v1/{where}/jobs/{segment(name)}"}
        if kind in parent_paths:
            obj = self._cache.get(("owner", kind, namespace, name), lambda: self._get(parent_paths[kind]))
            parent = _controller((obj or {}).get("metadata", {}))
            if parent is not None:
                return parent
        return kind, name

    def _get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any] | None:
        try:
            return self.api.get(path, params)
        except KubernetesApiError as exc:
            if exc.status != 404:
                self.errors += 1
            return None


def _controller(meta: dict[str, Any]) -> tuple[str, str] | None:
    refs = meta.get("ownerReferences") or []
    for ref in refs:
        if ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("name"))
    return (str(refs[0].get("kind")), str(refs[0].get("name"))) if refs else None
