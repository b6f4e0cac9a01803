"""The Kubernetes side of a simulated fleet at one time: tenants, namespaces, Kueue queues, pods, demand.

Frozen dataclasses, as the Kubernetes-API inventory source of the collector would return them. Quota
usage counts the GPU requests of the admitted pods that exist at ``t`` (batch pods come and go).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar

import numpy as np

from gpulens.core.mig_catalog import model_by_name
from gpulens.sim.plan import FleetPlan
from gpulens.sim.pods import pod_identity
from gpulens.sim.scenario import Scenario, shape_resource
from gpulens.sim.workloads import batch_slots, pod_present

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


V = TypeVar("V")


def _frozen(d: Mapping[str, V]) -> Mapping[str, V]:
    return MappingProxyType(dict(d))


@dataclass(frozen=True)
class Tenant:
    name: str
    namespaces: tuple[str, ...]
    cluster_queue: str
    cost_center: str | None = None
    dedicated_pool: str | None = None
    virtual_cluster: str | None = None


@dataclass(frozen=True)
class Namespace:
    name: str
    tenant: str
    labels: Mapping[str, str] = field(default_factory=dict)
    network_policies: int = 0
    virtual_cluster: str | None = None

    def __hash__(self) -> int:
        return hash(self.name)


@dataclass(frozen=True)
class ResourceFlavor:
    """A Kueue ResourceFlavor: one node pool (GPU model and sharing mode)."""

    name: str
    gpu_model: str
    sharing_mode: str
    node_labels: Mapping[str, str] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash(self.name)


@dataclass(frozen=True)
class QueueResource:
    """One (flavor, resource) quota line of a ClusterQueue, with its usage at the time."""

    flavor: str
    resource: str
    nominal_quota: float
    borrowing_limit: float | None
    lending_limit: float | None
    usage: float


@dataclass(frozen=True)
class ClusterQueue:
    name: str
    tenant: str
    cohort: str | None
    resources: tuple[QueueResource, ...]
    admitted_workloads: int
    pending_workloads: int


@dataclass(frozen=True)
class LocalQueue:
    name: str
    namespace: str
    cluster_queue: str
    tenant: str


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    uid: str
    node: str
    phase: str
    tenant: str
    queue: str | None
    workload_kind: str
    workload_name: str
    gpu_requests: Mapping[str, float]
    labels: Mapping[str, str]

    def __hash__(self) -> int:
        return hash(self.uid)


@dataclass(frozen=True)
class PendingDemand:
    """Workloads waiting for capacity, by requested shape (``gpu`` or a MIG profile)."""

    tenant: str
    cluster_queue: str
    namespace: str
    flavor: str
    resource: str
    profile: str
    gpu_model: str
    quantity: float
    """Devices of that shape per workload times ``workloads``."""
    workloads: int


@dataclass(frozen=True)
class ResourceQuota:
    """A namespace's ResourceQuota on GPU resources, with what the existing pods request."""

    namespace: str
    name: str
    tenant: str
    hard: Mapping[str, float]
    used: Mapping[str, float]

    def __hash__(self) -> int:
        return hash((self.namespace, self.name))


RESOURCE_QUOTA_NAME = "gpu-quota"


@dataclass(frozen=True)
class ClusterState:
    timestamp: float
    tenants: tuple[Tenant, ...]
    namespaces: tuple[Namespace, ...]
    resource_flavors: tuple[ResourceFlavor, ...]
    cluster_queues: tuple[ClusterQueue, ...]
    local_queues: tuple[LocalQueue, ...]
    pods: tuple[Pod, ...]
    pending: tuple[PendingDemand, ...]
    resource_quotas: tuple[ResourceQuota, ...] = ()


def pod_labels(pod_queue: str | None, workload_name: str, tenant_labels: Mapping[str, str]) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": workload_name, **tenant_labels}
    if pod_queue:
        labels[QUEUE_LABEL] = pod_queue
    return labels


def build_cluster_state(scenario: Scenario, plan: FleetPlan, t: float) -> ClusterState:
    """The cluster's tenancy and queue objects at ``t`` for a scenario and its placement plan."""
    s = scenario
    tarr = np.array([float(t)])
    tenants = []
    namespaces: list[Namespace] = []
    local_queues: list[LocalQueue] = []
    for ten in s.tenants:
        dedicated = next((p.name for p in s.pools if p.dedicated_tenant == ten.name), None)
        vc = next((ns.virtual_cluster for ns in ten.namespaces if ns.virtual_cluster), None)
        tenants.append(
            Tenant(ten.name, tuple(ns.name for ns in ten.namespaces), ten.queue_name, ten.cost_center, dedicated, vc)
        )
        namespaces.extend(
            Namespace(ns.name, ten.name, _frozen(ns.labels), ns.network_policies, ns.virtual_cluster)
            for ns in ten.namespaces
        )
        local_queues.extend(LocalQueue(q, ns, ten.queue_name, ten.name) for q, ns in ten.local_queue_map().items())
    flavors = [
        ResourceFlavor(p.flavor_name, p.model.name, str(p.sharing), _frozen(p.flavor_labels))
        for p in s.pools
    ]
    pods = []
    usage: dict[tuple[str, str, str], float] = defaultdict(float)
    admitted: dict[str, set[str]] = defaultdict(set)
    ns_used: dict[tuple[str, str], float] = defaultdict(float)
    for node in plan.nodes.values():
        for pod in node.pods:
            if not pod_present(s.seed, pod, tarr)[0]:
                continue
            slot = int(batch_slots(pod, tarr)[0]) if pod.archetype == "batch" else -1
            name, uid = pod_identity(s.seed, pod, slot)
            requests = pod.requests
            pods.append(
                Pod(pod.namespace, name, uid, node.name, "Running", pod.tenant, pod.queue, pod.workload.workload_kind,
                    pod.workload.name, _frozen(requests), _frozen(pod_labels(pod.queue, pod.workload.name, pod.workload.labels)))
            )
            for res, qty in requests.items():
                ns_used[(pod.namespace, f"requests.{res}")] += qty
            if pod.cluster_queue:
                for res, qty in requests.items():
                    usage[(pod.cluster_queue, pod.flavor, res)] += qty
                admitted[pod.cluster_queue].add(pod.workload.name if slot < 0 else f"{pod.workload.name}-{slot}")
    cluster_queues = []
    pending = []
    for ten in s.tenants:
        cq = ten.queue_name
        resources = tuple(
            QueueResource(q.flavor, q.resource, q.nominal, q.borrowing_limit, q.lending_limit, usage.get((cq, q.flavor, q.resource), 0.0))
            for q in ten.quotas
        )
        for p in ten.pending:
            pending.append(
                PendingDemand(ten.name, cq, p.namespace or ten.namespaces[0].name, p.flavor, shape_resource(p.shape),
                              p.shape, model_by_name(p.gpu_model).name, p.quantity * p.workloads, p.workloads)
            )
        n_pending = sum(p.workloads for p in ten.pending)
        cluster_queues.append(ClusterQueue(cq, ten.name, ten.cohort, resources, len(admitted.get(cq, ())), n_pending))
    quotas = tuple(
        ResourceQuota(ns.name, RESOURCE_QUOTA_NAME, ten.name, _frozen(ns.resource_quota),
                      _frozen({r: ns_used.get((ns.name, r), 0.0) for r in ns.resource_quota}))
        for ten in s.tenants for ns in ten.namespaces if ns.resource_quota
    )
    return ClusterState(
        timestamp=float(t), tenants=tuple(tenants), namespaces=tuple(namespaces), resource_flavors=tuple(flavors),
        cluster_queues=tuple(cluster_queues), local_queues=tuple(local_queues), pods=tuple(pods), pending=tuple(pending),
        resource_quotas=quotas,
    )
