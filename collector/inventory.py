"""Cluster inventory from the Kubernetes API: namespaces, GPU pods, GPU nodes, Kueue queues, quotas.

A snapshot at time ``t`` becomes one window of source ``kubernetes`` in the store's inventory tables
(``namespace_snapshots``, ``pod_snapshots``, ``quota_snapshots``, ``nodes``, ``tenants``,
``resource_flavors``: each Kueue ResourceFlavor's ``spec.nodeLabels``). The API is
reached through the small :class:`ClusterApi` interface; :class:`KubernetesClusterApi` implements it
with the official ``kubernetes`` client (raw JSON, no model conversion).

Tenant of a namespace: label ``gpulens.io/tenant``, then ``capsule.clastix.io/tenant``, then
``tenant``, else the namespace name. Tenant of a pod: its own ``gpulens.io/tenant`` label, then its
Kueue LocalQueue's ClusterQueue tenant, then its namespace's tenant. Tenant of a ClusterQueue: its
``gpulens.io/tenant`` label, else its name. Node pool: ``gpulens.io/pool``, then the usual cloud
node-pool labels. Only pods requesting ``nvidia.com/*`` resources and nodes with NVIDIA labels or
allocatable GPUs are kept. LocalQueues are stored in ``quota_snapshots`` as ``object_kind =
'LocalQueue'`` rows (usage per flavor and resource; ``annotations.clusterQueue`` names their queue).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

import polars as pl

from gpulens.collector.gangs import gang_of
from gpulens.collector.store import Store, WindowResult, to_datetime

SOURCE = "kubernetes"
TENANT_LABELS = ("gpulens.io/tenant", "capsule.clastix.io/tenant", "tenant")
VCLUSTER_LABELS = ("gpulens.io/virtual-cluster", "vcluster.loft.sh/managed-by")
POOL_LABELS = (
    "gpulens.io/pool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "karpenter.sh/nodepool",
    "kubernetes.azure.com/agentpool",
    "node.kubernetes.io/instance-type",
)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_SUFFIX = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def parse_quantity(value: Any) -> float | None:
    """A Kubernetes quantity (``4``, ``500m``, ``80Gi``) as a number; ``None`` when absent or invalid."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    return float(match.group(1)) * _SUFFIX.get(match.group(2) or "", 1.0)


def is_gpu_resource(name: str) -> bool:
    return name.startswith(("nvidia.com/", "requests.nvidia.com/", "limits.nvidia.com/"))


class ClusterApi(Protocol):
    """The few reads the inventory needs; each returns the API's ``items`` as plain dicts."""

    def list_namespaces(self) -> list[dict[str, Any]]: ...

    def list_pods(self) -> list[dict[str, Any]]: ...

    def list_nodes(self) -> list[dict[str, Any]]: ...

    def list_resource_quotas(self) -> list[dict[str, Any]]: ...

    def list_network_policies(self) -> list[dict[str, Any]]: ...

    def list_cluster_queues(self) -> list[dict[str, Any]]: ...

    def list_local_queues(self) -> list[dict[str, Any]]: ...

    def list_resource_flavors(self) -> list[dict[str, Any]]: ...


class KubernetesClusterApi:
    """:class:`ClusterApi` over the official ``kubernetes`` client (any ``ApiClient`` configuration)."""

    KUEUE_GROUP = "kueue.x-k8s.io"
    KUEUE_VERSIONS = ("v1beta2", "v1beta1")

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self._net = client.NetworkingV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | None = None) -> KubernetesClusterApi:
        """In-cluster configuration when available (and no file given), else the kubeconfig."""
        from kubernetes import client, config

        from gpulens.core.errors import UserError

        cfg = client.Configuration()
        try:
            if kubeconfig is None:
                try:
                    config.load_incluster_config(client_configuration=cfg)
                except config.ConfigException:
                    config.load_kube_config(client_configuration=cfg)
            else:
                config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        except (config.ConfigException, OSError) as exc:
            raise UserError(f"cannot load Kubernetes configuration{f' from {kubeconfig}' if kubeconfig else ''}: {exc}") from exc
        return cls(client.ApiClient(cfg))

    @staticmethod
    def _items(response: Any) -> list[dict[str, Any]]:
        body = json.loads(response.data) if hasattr(response, "data") else response
        return list(body.get("items") or [])

    def list_namespaces(self) -> list[dict[str, Any]]:
        return self._items(self._core.list_namespace(_preload_content=False))

    def list_pods(self) -> list[dict[str, Any]]:
        return self._items(self._core.list_pod_for_all_namespaces(_preload_content=False))

    def list_nodes(self) -> list[dict[str, Any]]:
        return self._items(self._core.list_node(_preload_content=False))

    def list_resource_quotas(self) -> list[dict[str, Any]]:
        return self._items(self._core.list_resource_quota_for_all_namespaces(_preload_content=False))

    def list_network_policies(self) -> list[dict[str, Any]]:
        return self._items(self._net.list_network_policy_for_all_namespaces(_preload_content=False))

    def _kueue(self, plural: str, namespaced: bool) -> list[dict[str, Any]]:
        from kubernetes.client.exceptions import ApiException

        for version in self.KUEUE_VERSIONS:
            try:
                if namespaced:
                    resp = self._custom.list_custom_object_for_all_namespaces(
                        self.KUEUE_GROUP, version, plural, _preload_content=False
                    )
                else:
                    resp = self._custom.list_cluster_custom_object(
                        self.KUEUE_GROUP, version, plural, _preload_content=False
                    )
                return self._items(resp)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return []  # Kueue not installed

    def list_cluster_queues(self) -> list[dict[str, Any]]:
        return self._kueue("clusterqueues", namespaced=False)

    def list_local_queues(self) -> list[dict[str, Any]]:
        return self._kueue("localqueues", namespaced=True)

    def list_resource_flavors(self) -> list[dict[str, Any]]:
        return self._kueue("resourceflavors", namespaced=False)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict(_meta(obj).get("labels") or {})


def _first_label(labels: dict[str, str], keys: Iterable[str]) -> str | None:
    for key in keys:
        if labels.get(key):
            return labels[key]
    return None


def _workload(pod: dict[str, Any]) -> tuple[str, str]:
    """Top owner kind and name: a ReplicaSet with a pod-template-hash is its Deployment; gang labels name a group."""
    owners = _meta(pod).get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    gang = gang_of(_labels(pod), str(owner.get("kind", "")) if owner else "Pod")
    if gang is not None:
        return gang
    if owner is None:
        return "Pod", str(_meta(pod).get("name", ""))
    kind, name = str(owner.get("kind", "")), str(owner.get("name", ""))
    hash_ = _labels(pod).get("pod-template-hash")
    if kind == "ReplicaSet" and hash_ and name.endswith(f"-{hash_}"):
        return "Deployment", name[: -len(hash_) - 1]
    if kind == "Job":
        labels = _labels(pod)
        if labels.get("jobset.sigs.k8s.io/jobset-name"):
            return "JobSet", labels["jobset.sigs.k8s.io/jobset-name"]
    return kind, name


def _gpu_requests(pod: dict[str, Any]) -> dict[str, float]:
    total: dict[str, float] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        res = container.get("resources") or {}
        wanted = dict(res.get("limits") or {})
        wanted.update(res.get("requests") or {})
        for name, qty in wanted.items():
            value = parse_quantity(qty)
            if is_gpu_resource(name) and value:
                total[name] = total.get(name, 0.0) + value
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


def snapshot_frames(api: ClusterApi, now: float) -> dict[str, pl.DataFrame]:
    """Read the cluster once and build the inventory frames for time ``now``."""
    ts = to_datetime(now)
    namespaces = api.list_namespaces()
    policies: dict[str, int] = {}
    for pol in api.list_network_policies():
        ns = str(_meta(pol).get("namespace", ""))
        policies[ns] = policies.get(ns, 0) + 1
    ns_tenant: dict[str, str] = {}
    ns_rows = []
    tenant_rows: dict[str, dict[str, Any]] = {}
    for ns_obj in namespaces:
        name = str(_meta(ns_obj).get("name", ""))
        labels = _labels(ns_obj)
        tenant = _first_label(labels, TENANT_LABELS) or name
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
    for cq in api.list_cluster_queues():
        name = str(_meta(cq).get("name", ""))
        tenant = _labels(cq).get("gpulens.io/tenant") or name
        cq_tenant[name] = tenant
        usage = {
            (f.get("name", ""), r.get("name", "")): parse_quantity(r.get("total"))
            for f in (cq.get("status") or {}).get("flavorsUsage") or []
            for r in f.get("resources") or []
        }
        annotations = _meta(cq).get("annotations") or {}
        for group in (cq.get("spec") or {}).get("resourceGroups") or []:
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
                                {**annotations, "cohort": (cq.get("spec") or {}).get("cohortName")
                                 or (cq.get("spec") or {}).get("cohort")}
                            ),
                            "source": SOURCE,
                        }
                    )
    lq_cluster_queue: dict[tuple[str, str], str] = {}
    for lq in api.list_local_queues():
        ns, name = str(_meta(lq).get("namespace", "")), str(_meta(lq).get("name", ""))
        cq_name = str((lq.get("spec") or {}).get("clusterQueue", ""))
        lq_cluster_queue[(ns, name)] = cq_name
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
    for rq in api.list_resource_quotas():
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
    for pod in api.list_pods():
        requests = _gpu_requests(pod)
        if not requests:
            continue
        meta, labels = _meta(pod), _labels(pod)
        ns = str(meta.get("namespace", ""))
        queue = labels.get(QUEUE_LABEL)
        pod_cq = lq_cluster_queue.get((ns, queue or ""))
        pod_tenant = labels.get("gpulens.io/tenant") or (cq_tenant.get(pod_cq) if pod_cq else None)
        kind, wname = _workload(pod)
        pod_rows.append(
            {
                "ts": ts,
                "namespace": ns,
                "pod": str(meta.get("name", "")),
                "uid": meta.get("uid"),
                "node": (pod.get("spec") or {}).get("nodeName"),
                "phase": (pod.get("status") or {}).get("phase"),
                "tenant": pod_tenant or ns_tenant.get(ns, ns),
                "queue": queue,
                "workload_kind": kind,
                "workload_name": wname,
                "gpu_requests": _dumps(requests),
                "labels": _dumps(labels),
                "source": SOURCE,
            }
        )

    node_rows = []
    for node in api.list_nodes():
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
        for rf in api.list_resource_flavors()
    ]
    frames = {
        "resource_flavors": pl.DataFrame(flavor_rows, schema={"flavor": pl.Utf8, "node_labels": pl.Utf8,
                                                               "first_seen": pl.Datetime("us"),
                                                               "last_seen": pl.Datetime("us")}),
        "namespace_snapshots": pl.DataFrame(ns_rows, schema_overrides={"virtual_cluster": pl.Utf8}),
        "quota_snapshots": pl.DataFrame(quota_rows, infer_schema_length=None),
        "pod_snapshots": pl.DataFrame(pod_rows, infer_schema_length=None),
        "nodes": pl.DataFrame(node_rows, infer_schema_length=None),
        "tenants": pl.DataFrame(list(tenant_rows.values()), schema_overrides={"virtual_cluster": pl.Utf8}),
    }
    return {k: v for k, v in frames.items() if v.height}


def collect_inventory(
    store: Store, api: ClusterApi, *, clock: Callable[[], float] = time.time
) -> WindowResult:
    """Snapshot the cluster into the store as one window (``[now, now]``) of source ``kubernetes``."""
    now = clock()
    frames = snapshot_frames(api, now)
    return store.ingest_window(SOURCE, now, now, frames, now=datetime.now(UTC).timestamp())
