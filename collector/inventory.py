"""Cluster inventory from the Kubernetes API: namespaces, GPU pods, GPU nodes, Kueue and KAI queues, quotas.

A snapshot at time ``t`` becomes one window of source ``kubernetes`` in the store's inventory tables
(``namespace_snapshots``, ``pod_snapshots``, ``quota_snapshots``, ``nodes``, ``tenants``,
``resource_flavors``: each Kueue ResourceFlavor's ``spec.nodeLabels``). The cluster is read through the
one read protocol, :class:`~gpulens.core.kube_api.KubernetesReads` (lists by GET; Kueue at the
configured API version first, the others on 404, none when Kueue is not installed).

Tenants follow the same rules and :class:`~gpulens.core.tenancy.rules.TenancyConfig` as the
exporter (:mod:`gpulens.core.tenancy.pod_tenancy`): a pod's tenant and owning workload are what the
exporter gives the same pod; a namespace's tenant is what its namespace-scoped rules say; a
ClusterQueue's is its tenant label, else its name. Owners of pods (ReplicaSets, Jobs) are read one GET
each, cached for the snapshot. Node pool: ``gpulens.io/pool``, then the usual cloud node-pool labels.
Only pods requesting ``nvidia.com/*`` resources (HAMi's included), a part of a GPU (milli-GPU and gpushare
extended resources, KAI's ``gpu-fraction`` / ``gpu-memory`` annotations: :mod:`gpulens.core.gpu_share`) and
nodes with NVIDIA labels or allocatable GPUs are kept; a pod asking for part of a GPU also gets its share in
``gpu_requests`` (``gpulens.io/gpu-share``, ``gpulens.io/gpu-share-memory-bytes``). LocalQueues are stored in
``quota_snapshots`` as ``object_kind = 'LocalQueue'`` rows (usage per flavor and resource;
``annotations.clusterQueue`` names their queue). KAI Scheduler's Queues (``scheduling.run.ai/v2``, none when
KAI is not installed) become quota rows and pending demand as :mod:`collector.kai_queues` says.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import polars as pl

from collector.kai_queues import KAI_QUEUES_PATH, kai_queue_rows
from collector.kueue_api import KueueApi, effective_quotas, served_kueue
from collector.store import Store, WindowResult, to_datetime
from gpulens.core.errors import UserError
from gpulens.core.gpu_share import FRACTION_RESOURCES, fraction_annotations, pod_gpu_share, pod_requests
from gpulens.core.kube_api import KubernetesApiError, KubernetesReads, MalformedAnswerError, NotFoundError
from gpulens.core.quantity import parse_quantity
from gpulens.core.tenancy.api_objects import KUEUE_GROUP, ApiTenancyObjects
from gpulens.core.tenancy.pod_tenancy import (
    cluster_queue_tenant,
    namespace_tenant,
    pod_local_queue,
    pod_tenant,
    pod_workload,
)
from gpulens.core.tenancy.resolver import KUEUE_QUEUE_LABEL
from gpulens.core.tenancy.rules import TenancyConfig

SOURCE = "kubernetes"
SHARE_KEY = "gpulens.io/gpu-share"
SHARE_MEMORY_KEY = "gpulens.io/gpu-share-memory-bytes"
"""Keys of ``pod_snapshots.gpu_requests`` for a pod asking for part of a GPU: its GE and its memory per GPU."""
VCLUSTER_LABELS = ("gpulens.io/virtual-cluster", "vcluster.loft.sh/managed-by")
POOL_LABELS = (
    "gpulens.io/pool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
    "node.kubernetes.io/instance-type",
)


def is_gpu_resource(name: str) -> bool:
    """An NVIDIA device-plugin or HAMi resource, or an extended resource for part of a GPU (milli-GPU, gpushare)."""
    bare = name.removeprefix("requests.").removeprefix("limits.")
    return bare.startswith("nvidia.com/") or bare in FRACTION_RESOURCES


CORE_LISTS = {
    "namespaces": "/api/v1/namespaces",
    "pods": "/api/v1/pods",
    "nodes": "/api/v1/nodes",
    "resource_quotas": "/api/v1/resourcequotas",
    "network_policies": "/apis/networking.k8s.io/v1/networkpolicies",
}


def list_items(api: KubernetesReads, path: str) -> list[dict[str, Any]]:
    """The ``items`` of the list at ``path``, each an object whose ``metadata``, ``spec`` and ``status`` (and
    labels and annotations) are objects where present; a list of another shape is a
    :class:`MalformedAnswerError` naming the request and what it held (``items[0] is 1, not an object``)."""
    items = api.get(path).get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise _wrong_shape(path, f"items is {_shown(items)}, not a list")
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _wrong_shape(path, f"items[{i}] is {_shown(item)}, not an object")
        _require_objects(path, f"items[{i}]", item, _OBJECT_PARTS)
        _require_objects(path, f"items[{i}].metadata", _meta(item), _METADATA_MAPS)
    return items


_OBJECT_PARTS = ("metadata", "spec", "status")
_METADATA_MAPS = ("labels", "annotations")


def _require_objects(path: str, where: str, obj: dict[str, Any], fields: tuple[str, ...]) -> None:
    for field in fields:
        value = obj.get(field)
        if value is not None and not isinstance(value, dict):
            raise _wrong_shape(path, f"{where}.{field} is {_shown(value)}, not an object")


def _wrong_shape(path: str, what: str) -> MalformedAnswerError:
    return MalformedAnswerError(0, "GET", path, f"the list has the wrong shape: {what}")


def _shown(value: Any) -> str:
    """A value of a reply as JSON, cut short (it is data from the API server)."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def list_kueue(api: KubernetesReads, plural: str, kueue: KueueApi) -> list[dict[str, Any]]:
    """Kueue objects of every namespace at the served version (:mod:`collector.kueue_api`); none
    without Kueue."""
    for version in kueue.versions_to_try():
        try:
            return list_items(api, f"/apis/{KUEUE_GROUP}/{version}/{plural}")
        except NotFoundError:
            continue
    return []


def list_kai_queues(api: KubernetesReads) -> list[dict[str, Any]]:
    """KAI Scheduler's Queue objects (:mod:`collector.kai_queues`); none where KAI is not installed."""
    try:
        return list_items(api, KAI_QUEUES_PATH)
    except NotFoundError:
        return []


class _SnapshotObjects:
    """:class:`TenancyObjects` from the snapshot's lists; owners by GET (cached for the snapshot)."""

    def __init__(self, namespaces: list[dict[str, Any]], local_queues: list[dict[str, Any]],
                 cluster_queues: list[dict[str, Any]], owners: ApiTenancyObjects) -> None:
        self._ns = {str(_meta(o).get("name", "")): o for o in namespaces}
        self._lq = {(str(_meta(o).get("namespace", "")), str(_meta(o).get("name", ""))): o for o in local_queues}
        self._cq = {str(_meta(o).get("name", "")): o for o in cluster_queues}
        self._owners = owners

    def namespace(self, name: str) -> dict[str, Any] | None:
        return self._ns.get(name)

    def local_queue(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._lq.get((namespace, name))

    def cluster_queue(self, name: str) -> dict[str, Any] | None:
        return self._cq.get(name)

    def owner(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._owners.owner(kind, namespace, name)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict(_meta(obj).get("labels") or {})


def _first_label(labels: dict[str, str], keys: Iterable[str]) -> str | None:
    for key in keys:
        if labels.get(key):
            return labels[key]
    return None


def _gpu_requests(pod: dict[str, Any]) -> dict[str, float]:
    """The pod's GPU resources (and fraction annotations) by name; a pod asking for part of a GPU also
    gets its share per GPU (``gpulens.io/gpu-share``, GE) and memory per GPU (``gpulens.io/gpu-share-memory-bytes``)
    where the request states them (:mod:`gpulens.core.gpu_share`)."""
    total = {name: value for name, value in pod_requests(pod).items() if is_gpu_resource(name)}
    total.update(fraction_annotations(pod))
    share = pod_gpu_share(pod)
    if share is not None:
        ge = share.share()
        if ge is not None:
            total[SHARE_KEY] = ge
        if share.memory_bytes is not None:
            total[SHARE_MEMORY_KEY] = float(share.memory_bytes)
    return total


def _sharing_mode(labels: dict[str, str]) -> str | None:
    strategy = labels.get("nvidia.com/gpu.sharing-strategy")
    if strategy in ("time-slicing", "mps"):
        return strategy
    mig_config = labels.get("nvidia.com/mig.config")
    if labels.get("nvidia.com/mig.strategy") in ("mixed", "single") and mig_config not in (None, "all-disabled"):
        return "mig"
    return "exclusive" if labels.get("nvidia.com/gpu.product") else None


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def snapshot_frames(api: KubernetesReads, now: float, config: TenancyConfig | None = None, *,
                    kueue: KueueApi | None = None) -> dict[str, pl.DataFrame]:
    """Read the cluster once and build the inventory frames for time ``now`` (tenants by ``config``; Kueue
    at the version ``kueue`` names, discovered when None)."""
    config = config or TenancyConfig()
    kueue = kueue or served_kueue(api, config.kueue_api_version)
    ts = to_datetime(now)
    namespaces = list_items(api, CORE_LISTS["namespaces"])
    cluster_queues = list_kueue(api, "clusterqueues", kueue)
    local_queues = list_kueue(api, "localqueues", kueue)
    objects = _SnapshotObjects(namespaces, local_queues, cluster_queues, ApiTenancyObjects(api, config))
    policies: dict[str, int] = {}
    for pol in list_items(api, CORE_LISTS["network_policies"]):
        ns = str(_meta(pol).get("namespace", ""))
        policies[ns] = policies.get(ns, 0) + 1
    ns_tenant: dict[str, str] = {}
    ns_rows = []
    tenant_rows: dict[str, dict[str, Any]] = {}
    for ns_obj in namespaces:
        name = str(_meta(ns_obj).get("name", ""))
        labels = _labels(ns_obj)
        tenant = namespace_tenant(name, labels, config)
        vcluster = _first_label(labels, VCLUSTER_LABELS)
        ns_tenant[name] = tenant
        ns_rows.append(
            {
                "ts": ts,
                "namespace": name,
                "tenant": tenant,
                "labels": _dumps(labels),
                "network_policies": policies.get(name, 0),
                "virtual_cluster": vcluster,
                "source": SOURCE,
            }
        )
        known = tenant_rows.setdefault(tenant, {"tenant": tenant, "virtual_cluster": None})
        known["virtual_cluster"] = known["virtual_cluster"] or vcluster

    quota_rows: list[dict[str, Any]] = []
    cq_tenant: dict[str, str] = {}
    for cq in cluster_queues:
        name = str(_meta(cq).get("name", ""))
        tenant = cluster_queue_tenant(name, cq, config)
        cq_tenant[name] = tenant
        usage = {
            (f.get("name", ""), r.get("name", "")): parse_quantity(r.get("total"))
            for f in (cq.get("status") or {}).get("flavorsUsage") or []
            for r in f.get("resources") or []
        }
        annotations = _meta(cq).get("annotations") or {}
        effective = effective_quotas(cq)
        orchestrator = {"orchestrator": effective.orchestrator} if effective else {}
        for group in (effective and effective.resource_groups) or (cq.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for res in flavor.get("resources") or []:
                    key = (flavor.get("name", ""), res.get("name", ""))
                    quota_rows.append(
                        {
                            "ts": ts,
                            "object_kind": "ClusterQueue",
                            "object_namespace": "",
                            "object_name": name,
                            "tenant": tenant,
                            "flavor": key[0],
                            "resource": key[1],
                            "nominal_quota": parse_quantity(res.get("nominalQuota")),
                            "borrowing_limit": parse_quantity(res.get("borrowingLimit")),
                            "lending_limit": parse_quantity(res.get("lendingLimit")),
                            "usage": usage.get(key),
                            "annotations": _dumps(
                                {**annotations, **orchestrator, "cohort": (cq.get("spec") or {}).get("cohortName")
                                 or (cq.get("spec") or {}).get("cohort")}
                            ),
                            "source": SOURCE,
                        }
                    )
    for lq in local_queues:
        ns, name = str(_meta(lq).get("namespace", "")), str(_meta(lq).get("name", ""))
        cq_name = str((lq.get("spec") or {}).get("clusterQueue", ""))
        for f in (lq.get("status") or {}).get("flavorsUsage") or [{"name": "", "resources": []}]:
            resources = f.get("resources") or [{"name": "", "total": None}]
            for r in resources:
                quota_rows.append(
                    {
                        "ts": ts,
                        "object_kind": "LocalQueue",
                        "object_namespace": ns,
                        "object_name": name,
                        "tenant": cq_tenant.get(cq_name) or ns_tenant.get(ns, ns),
                        "flavor": f.get("name", ""),
                        "resource": r.get("name", ""),
                        "nominal_quota": None,
                        "borrowing_limit": None,
                        "lending_limit": None,
                        "usage": parse_quantity(r.get("total")),
                        "annotations": _dumps({"clusterQueue": cq_name}),
                        "source": SOURCE,
                    }
                )
    kai_quotas, pending_rows = kai_queue_rows(list_kai_queues(api), ts, SOURCE, config)
    quota_rows.extend(kai_quotas)
    for rq in list_items(api, CORE_LISTS["resource_quotas"]):
        ns, name = str(_meta(rq).get("namespace", "")), str(_meta(rq).get("name", ""))
        hard = (rq.get("spec") or {}).get("hard") or {}
        used = (rq.get("status") or {}).get("used") or {}
        for resource, qty in hard.items():
            if not is_gpu_resource(resource):
                continue
            quota_rows.append(
                {
                    "ts": ts,
                    "object_kind": "ResourceQuota",
                    "object_namespace": ns,
                    "object_name": name,
                    "tenant": ns_tenant.get(ns, ns),
                    "flavor": "",
                    "resource": resource.removeprefix("requests.").removeprefix("limits."),
                    "nominal_quota": parse_quantity(qty),
                    "borrowing_limit": None,
                    "lending_limit": None,
                    "usage": parse_quantity(used.get(resource)),
                    "annotations": _dumps({"hard_key": resource}),
                    "source": SOURCE,
                }
            )

    pod_rows = []
    for pod in list_items(api, CORE_LISTS["pods"]):
        requests = _gpu_requests(pod)
        if not requests:
            continue
        meta, labels = _meta(pod), _labels(pod)
        ns = str(meta.get("namespace", ""))
        kind, wname = pod_workload(pod, objects)
        pod_rows.append(
            {
                "ts": ts,
                "namespace": ns,
                "pod": str(meta.get("name", "")),
                "uid": meta.get("uid"),
                "node": (pod.get("spec") or {}).get("nodeName"),
                "phase": (pod.get("status") or {}).get("phase"),
                "tenant": pod_tenant(ns, labels, objects, config).tenant,
                "queue": pod_local_queue(labels, KUEUE_QUEUE_LABEL),
                "workload_kind": kind,
                "workload_name": wname,
                "gpu_requests": _dumps(requests),
                "labels": _dumps(labels),
                "source": SOURCE,
            }
        )

    node_rows = []
    for node in list_items(api, CORE_LISTS["nodes"]):
        labels = _labels(node)
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        if not (labels.get("nvidia.com/gpu.product") or any(is_gpu_resource(k) for k in allocatable)):
            continue
        node_rows.append(
            {
                "node": str(_meta(node).get("name", "")),
                "pool": _first_label(labels, POOL_LABELS),
                "gpu_model": labels.get("nvidia.com/gpu.product"),
                "sharing_mode": _sharing_mode(labels),
                "nvlink_domain": labels.get("nvidia.com/gpu.clique"),
                "dedicated_tenant": labels.get("gpulens.io/dedicated-tenant"),
                "labels": _dumps(labels),
                "first_seen": ts,
                "last_seen": ts,
            }
        )
    flavor_rows = [
        {"flavor": str(_meta(rf).get("name", "")), "node_labels": _dumps((rf.get("spec") or {}).get("nodeLabels") or {}),
         "first_seen": ts, "last_seen": ts}
        for rf in list_kueue(api, "resourceflavors", kueue)
    ]
    frames = {
        "resource_flavors": pl.DataFrame(flavor_rows, schema={"flavor": pl.Utf8, "node_labels": pl.Utf8,
                                                               "first_seen": pl.Datetime("us"),
                                                               "last_seen": pl.Datetime("us")}),
        "namespace_snapshots": pl.DataFrame(ns_rows, schema_overrides={"virtual_cluster": pl.Utf8}),
        "quota_snapshots": pl.DataFrame(quota_rows, infer_schema_length=None),
        "pod_snapshots": pl.DataFrame(pod_rows, infer_schema_length=None),
        "pending_demand": pl.DataFrame(pending_rows, infer_schema_length=None),
        "nodes": pl.DataFrame(node_rows, infer_schema_length=None),
        "tenants": pl.DataFrame(list(tenant_rows.values()), schema_overrides={"virtual_cluster": pl.Utf8}),
    }
    return {k: v for k, v in frames.items() if v.height}


def collect_inventory(
    store: Store, api: KubernetesReads, *, config: TenancyConfig | None = None,
    clock: Callable[[], float] = time.time, say: Callable[[str], None] = lambda line: None,
) -> WindowResult:
    """Snapshot the cluster into the store as one window (``[now, now]``) of source ``kubernetes``; a
    failed read (unreachable, no answer, forbidden) is a ``UserError`` and writes nothing. ``say`` hears
    which Kueue API version was read (after a successful read only)."""
    now = clock()
    try:
        kueue = served_kueue(api, (config or TenancyConfig()).kueue_api_version)
        frames = snapshot_frames(api, now, config, kueue=kueue)
    except KubernetesApiError as exc:
        raise UserError(f"Kubernetes inventory failed: {exc}") from exc
    say(kueue.statement)  # after the reads: a failed run says one line only
    return store.ingest_window(SOURCE, now, now, frames, now=datetime.now(UTC).timestamp())
