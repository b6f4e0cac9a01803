"""Which quota system a stored quota object belongs to (Kueue, KAI Scheduler, Volcano, core Kubernetes).

``quota_snapshots.object_kind`` names the object's kind. KAI Scheduler and Volcano both call theirs
``Queue``, so their kinds are stored qualified by API group, as ``kubectl`` spells them
(``Queue.scheduling.run.ai``, ``Queue.scheduling.volcano.sh``); Kueue's and the core kinds are unique
and stay plain. Pending demand of such a queue is stored in ``pending_demand.cluster_queue`` as
``<kind>/<name>`` (:func:`pending_queue`), so a KAI queue and a ClusterQueue of the same name never
share their pending work.
"""

from __future__ import annotations

KAI_GROUP = "scheduling.run.ai"
KAI_VERSION = "v2"
VOLCANO_GROUP = "scheduling.volcano.sh"

CLUSTER_QUEUE = "ClusterQueue"
LOCAL_QUEUE = "LocalQueue"
COHORT = "Cohort"
RESOURCE_QUOTA = "ResourceQuota"
KAI_QUEUE = f"Queue.{KAI_GROUP}"
VOLCANO_QUEUE = f"Queue.{VOLCANO_GROUP}"

SYSTEMS = {
    CLUSTER_QUEUE: "kueue",
    LOCAL_QUEUE: "kueue",
    COHORT: "kueue",
    KAI_QUEUE: "kai",
    VOLCANO_QUEUE: "volcano",
    RESOURCE_QUOTA: "kubernetes",
}
"""The quota system of each stored object kind."""

QUOTA_KINDS = (CLUSTER_QUEUE, RESOURCE_QUOTA, KAI_QUEUE, VOLCANO_QUEUE)
"""Kinds whose entries are quotas to use and recommend (LocalQueues and Cohorts are views of ClusterQueues)."""


def system_of(object_kind: str) -> str:
    """``kueue``, ``kai``, ``volcano`` or ``kubernetes``; ``unknown`` for a kind gpulens does not know."""
    return SYSTEMS.get(object_kind, "unknown")


def pending_queue(object_kind: str, name: str) -> str:
    """The ``pending_demand.cluster_queue`` value of a queue: a ClusterQueue's name, else ``<kind>/<name>``."""
    return name if object_kind == CLUSTER_QUEUE else f"{object_kind}/{name}"


def pending_match_sql(queue: str, pending: str) -> str:
    """SQL condition: the ``pending_demand`` row aliased ``pending`` is work waiting for the quota object
    aliased ``queue`` (columns ``object_kind``, ``object_namespace``, ``object_name``): a ClusterQueue's by its
    name, another cluster-scoped queue's by ``<kind>/<name>``, a namespaced object's by its namespace."""
    return (
        f"CASE WHEN {queue}.object_kind = '{CLUSTER_QUEUE}' THEN {pending}.cluster_queue = {queue}.object_name "
        f"WHEN {queue}.object_namespace = '' THEN {pending}.cluster_queue = {queue}.object_kind || '/' || "
        f"{queue}.object_name ELSE {pending}.namespace = {queue}.object_namespace END"
    )
