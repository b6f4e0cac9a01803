"""The objects tenancy rules read, fetched from the Kubernetes API one GET each and cached.

Namespaces, LocalQueues, ClusterQueues and owners (ReplicaSets, Jobs) are cached for ``ttl`` seconds
(failures too, so a broken API server is not hammered); expired entries are swept once per ``ttl``, so
objects that went away do not pile up. Kueue objects are read at the configured API version first and
at the others on 404. A 404 is an answer (the object is absent); any other failure is counted (under
``tenants``, taken through :class:`~gpulens.core.device_model.ErrorCounting`) and the object is ``None``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from gpulens.core.device_model import ErrorCounter
from gpulens.core.kube_api import KubernetesApiError, KubernetesReads, segment
from gpulens.core.tenancy.rules import TenancyConfig

KUEUE_GROUP = "kueue.x-k8s.io"
TENANTS_SOURCE = "tenants"
"""``source`` label of failed tenant lookups (namespaces, queues, owners, the node's pod list)."""
_OWNER_PATHS = {"ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets/{name}",
                "Job": "/apis/batch/v1/namespaces/{ns}/jobs/{name}"}


class TtlCache:
    """Values loaded at most once per ``ttl``; expired entries swept once per ``ttl``."""

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


class ApiTenancyObjects:
    """:class:`~gpulens.core.tenancy.pod_tenancy.TenancyObjects` over GETs, cached."""

    def __init__(self, api: KubernetesReads, config: TenancyConfig, *, ttl: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.config = config
        self._cache = TtlCache(config.cache_seconds if ttl is None else ttl, clock)
        self._errors = ErrorCounter()

    def __len__(self) -> int:
        return len(self._cache)

    def take_errors(self) -> dict[str, int]:
        """Failed lookups since the previous call (:class:`~gpulens.core.device_model.ErrorCounting`)."""
        return self._errors.take_errors()

    def namespace(self, name: str) -> Mapping[str, Any] | None:
        return self._cache.get(("ns", name), lambda: self.get(f"/api/v1/namespaces/{segment(name)}"))  # type: ignore[no-any-return]

    def local_queue(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        where = f"namespaces/{segment(namespace)}/localqueues/{segment(name)}"
        return self._cache.get(("lq", namespace, name), lambda: self._kueue(where))  # type: ignore[no-any-return]

    def cluster_queue(self, name: str) -> Mapping[str, Any] | None:
        return self._cache.get(("cq", name), lambda: self._kueue(f"clusterqueues/{segment(name)}"))  # type: ignore[no-any-return]

    def owner(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        template = _OWNER_PATHS.get(kind)
        if template is None:
            return None
        path = template.format(ns=segment(namespace), name=segment(name))
        return self._cache.get(("owner", kind, namespace, name), lambda: self.get(path))  # type: ignore[no-any-return]

    def _kueue(self, where: str) -> dict[str, Any] | None:
        for version in self.config.kueue_versions():
            try:
                return self.api.get(f"/apis/{KUEUE_GROUP}/{version}/{where}")
            except KubernetesApiError as exc:
                if exc.status != 404:
                    self._errors.count(TENANTS_SOURCE)
                    return None
        return None

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any] | None:
        """The object at ``path``; ``None`` on 404 (not counted) or any other failure (counted)."""
        try:
            return self.api.get(path, params)
        except KubernetesApiError as exc:
            if exc.status != 404:
                self._errors.count(TENANTS_SOURCE)
            return None
