"""Which multi-pod job a pod belongs to when its owner reference does not say: LeaderWorkerSet and pod-group labels.

A LeaderWorkerSet's pods are owned by StatefulSets (the workers' by the leader pod), a Kueue plain-pod
group has no owner at all, and a scheduler-plugins PodGroup is named only by a label. Their labels name
the group: ``leaderworkerset.sigs.k8s.io/name`` -> ``LeaderWorkerSet``; ``kueue.x-k8s.io/pod-group-name``
-> ``Workload`` (Kueue admits the group as one Workload); ``scheduling.x-k8s.io/pod-group`` (or the older
``pod-group.scheduling.sigs.k8s.io``) -> ``PodGroup``. The LeaderWorkerSet label always wins; a pod-group
label wins unless the owner already is a whole job (JobSet, PyTorchJob, RayCluster, ...: the same group).
"""

from __future__ import annotations

from collections.abc import Mapping

LWS_LABEL = "leaderworkerset.sigs.k8s.io/name"
POD_GROUP_LABELS = (
    ("kueue.x-k8s.io/pod-group-name", "Workload"),
    ("scheduling.x-k8s.io/pod-group", "PodGroup"),
    ("pod-group.scheduling.sigs.k8s.io", "PodGroup"),
)
PER_POD_OWNERS = frozenset({"Pod", "", "Job", "ReplicaSet", "StatefulSet", "Deployment", "DaemonSet", "CronJob"})
"""Owners that do not group the pods of one multi-pod job by themselves."""
GROUP_KINDS = frozenset({"LeaderWorkerSet", "Workload", "PodGroup"})


def gang_of(labels: Mapping[str, str], owner_kind: str) -> tuple[str, str] | None:
    """``(kind, name)`` of the job the pod's labels name, or None when they name none (keep the owner)."""
    if labels.get(LWS_LABEL):
        return "LeaderWorkerSet", labels[LWS_LABEL]
    if owner_kind not in PER_POD_OWNERS:
        return None
    for label, kind in POD_GROUP_LABELS:
        if labels.get(label):
            return kind, labels[label]
    return None
