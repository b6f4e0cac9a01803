"""A pod's tenant and owning workload from its Kubernetes objects, by the configured rules: pure, no I/O.

The exporter (per node, cached GETs) and the collector (cluster-wide lists) both call these functions with
the same :class:`TenancyConfig`, so a pod never gets two tenants. The objects a rule needs (namespace,
LocalQueue, ClusterQueue, the ReplicaSet or Job that owns a pod) come through :class:`TenancyObjects`;
an object that is absent or unreadable is ``None`` and the rule simply does not answer.

Rules, in the configured order, first answer wins: ``pod_label`` and ``vcluster`` read a pod label;
``kueue`` takes the ClusterQueue Kueue names on the pod (``kueue.x-k8s.io/cluster-queue-name``, set by
AssignQueueLabelsForPods), else follows the pod's queue label (or Kueue's ``local-queue-name``) to its
LocalQueue's ClusterQueue; that queue's tenant is its ``cluster_queue_tenant_label`` label, else its name; ``capsule`` and ``namespace_label`` read a namespace
label; ``namespace`` is the namespace name (also the answer when no rule answers). The owning workload is
the pod's controller, and for a ReplicaSet or a Job, that object's own controller (a Deployment, a
CronJob, a JobSet) when it has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpulens.core.tenancy.gangs import gang_of
from gpulens.core.tenancy.rules import DEFAULT_KEYS, RuleKind, TenancyConfig

CLUSTER_QUEUE_NAME_LABEL = "kueue.x-k8s.io/cluster-queue-name"
LOCAL_QUEUE_NAME_LABEL = "kueue.x-k8s.io/local-queue-name"
"""Labels Kueue puts on the pods it admits (AssignQueueLabelsForPods, beta since Kueue 0.17)."""
POD_RULES = frozenset({RuleKind.POD_LABEL, RuleKind.VCLUSTER, RuleKind.KUEUE})
"""Rules that read the pod or its queue; the others read only its namespace."""
OWNER_KINDS = ("ReplicaSet", "Job")
"""Owners looked up for their own controller (Deployment, CronJob, JobSet)."""


class TenancyObjects(Protocol):
    """The Kubernetes objects the rules read; ``None`` when absent or unreadable."""

    def namespace(self, name: str) -> Mapping[str, Any] | None: ...

    def local_queue(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def cluster_queue(self, name: str) -> Mapping[str, Any] | None: ...

    def owner(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The ReplicaSet or Job ``name`` (``kind`` is one of :data:`OWNER_KINDS`)."""
        ...


@dataclass(frozen=True)
class TenantAnswer:
    """The tenant and the rule that named it (a :class:`RuleKind` value)."""

    tenant: str
    rule: str


def labels_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def pod_tenant(namespace: str, pod_labels: Mapping[str, str], objects: TenancyObjects,
               config: TenancyConfig) -> TenantAnswer:
    """The tenant of a pod in ``namespace`` with ``pod_labels`` (the first rule that answers)."""
    ns_labels: dict[str, str] | None = None
    for rule in config.rules:
        value: str | None = None
        if rule.kind in (RuleKind.POD_LABEL, RuleKind.VCLUSTER):
            value = pod_labels.get(rule.label)
        elif rule.kind is RuleKind.KUEUE:
            value = pod_queue_tenant(namespace, pod_labels, rule.label, objects, config)
        elif rule.kind in (RuleKind.CAPSULE, RuleKind.NAMESPACE_LABEL):
            if ns_labels is None:
                ns_labels = labels_of(objects.namespace(namespace))
            value = ns_labels.get(rule.label)
        elif rule.kind is RuleKind.NAMESPACE:
            value = namespace
        if value:
            return TenantAnswer(value, rule.kind.value)
    return TenantAnswer(namespace, RuleKind.NAMESPACE.value)


def namespace_tenant(namespace: str, labels: Mapping[str, str], config: TenancyConfig) -> str:
    """The tenant of a namespace itself (namespace-scoped rules only, in the configured order)."""
    for rule in config.rules:
        if rule.kind in (RuleKind.CAPSULE, RuleKind.NAMESPACE_LABEL) and labels.get(rule.label):
            return labels[rule.label]
        if rule.kind is RuleKind.NAMESPACE:
            return namespace
    return namespace


def cluster_queue_tenant(name: str, cluster_queue: Mapping[str, Any] | None, config: TenancyConfig) -> str:
    """A ClusterQueue's tenant: its tenant label, else its name."""
    return labels_of(cluster_queue).get(config.cluster_queue_tenant_label) or name


def queue_tenant(namespace: str, local_queue: str, objects: TenancyObjects, config: TenancyConfig) -> str | None:
    """The tenant of the ClusterQueue behind LocalQueue ``namespace/local_queue``; ``None`` without one."""
    lq = objects.local_queue(namespace, local_queue)
    cq_name = ((lq or {}).get("spec") or {}).get("clusterQueue")
    if not cq_name:
        return None
    return cluster_queue_tenant(str(cq_name), objects.cluster_queue(str(cq_name)), config)


def pod_local_queue(pod_labels: Mapping[str, str], queue_label: str = DEFAULT_KEYS[RuleKind.KUEUE]) -> str | None:
    """The pod's LocalQueue: its queue label, else the one Kueue stamped on it (``local-queue-name``)."""
    return pod_labels.get(queue_label) or pod_labels.get(LOCAL_QUEUE_NAME_LABEL) or None


def pod_queue_tenant(namespace: str, pod_labels: Mapping[str, str], queue_label: str, objects: TenancyObjects,
                     config: TenancyConfig) -> str | None:
    """The tenant of the pod's ClusterQueue: the one Kueue named on the pod first (no LocalQueue lookup),
    else the one behind its LocalQueue; ``None`` without either."""
    cq_name = pod_labels.get(CLUSTER_QUEUE_NAME_LABEL)
    if cq_name:
        return cluster_queue_tenant(cq_name, objects.cluster_queue(cq_name), config)
    queue = pod_local_queue(pod_labels, queue_label)
    return queue_tenant(namespace, queue, objects, config) if queue else None


def controller(meta: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the controlling owner reference, else of the first one; ``None`` without owners."""
    refs = meta.get("ownerReferences") or []
    for ref in refs:
        if ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("name"))
    return (str(refs[0].get("kind")), str(refs[0].get("name"))) if refs else None


def pod_workload(pod: Mapping[str, Any], objects: TenancyObjects) -> tuple[str, str]:
    """(kind, name) of the workload that owns the pod (``Pod`` and its own name without an owner); a
    LeaderWorkerSet or pod-group label names the multi-pod job instead (:mod:`.gangs`)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    owner = controller(meta)
    if owner is None:
        return gang_of(labels, "Pod") or ("Pod", str(meta.get("name", "")))
    kind, name = owner
    if kind in OWNER_KINDS:
        parent = controller((objects.owner(kind, str(meta.get("namespace", "")), name) or {}).get("metadata") or {})
        if parent is not None:
            kind, name = parent
    return gang_of(labels, kind) or (kind, name)
