"""One tenancy: the exporter and the collector give every pod the same tenant and owner, under any rule order.

Both read the same cluster (FakeKubernetesApi over real HTTP) with the same TenancyConfig: the exporter
through its per-node TenantResolver (cached GETs), the collector through its inventory snapshot (lists).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.inventory import snapshot_frames
from gpulens.core.kube_api import KubernetesClient
from gpulens.core.tenancy.resolver import TenantResolver
from gpulens.core.tenancy.rules import Rule, RuleKind, TenancyConfig
from tests.fakes.kubernetes_api import FakeKubernetesApi

NODE = "gpu-node-1"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
QUEUE = "kueue.x-k8s.io/queue-name"

NAMESPACES = {
    "shared": {"gpulens.io/tenant": "platform", "capsule.clastix.io/tenant": "oil", "team": "team-x"},
    "oil-dev": {"capsule.clastix.io/tenant": "oil"},
    "finance": {"gpulens.io/tenant": "finance-team"},
    "research": {},
    "plain": {},
}
LOCAL_QUEUES = {("research", "lq-gpu"): "cq-research", ("research", "lq-bare"): "cq-bare",
                ("research", "lq-gone"): "cq-deleted", ("shared", "lq-shared"): "cq-research"}
CLUSTER_QUEUES = {"cq-research": {"gpulens.io/tenant": "research-team"}, "cq-bare": {}}
OWNERS = {("ReplicaSet", "research", "web-5f7"): ("Deployment", "web"),
          ("Job", "research", "train-0"): ("JobSet", "train"),
          ("Job", "finance", "nightly-28001"): ("CronJob", "nightly")}
PODS: list[tuple[str, str, dict[str, str], tuple[str, str] | None]] = [  # namespace, name, labels, owner
    ("shared", "labelled", {"gpulens.io/tenant": "vision", "vcluster.loft.sh/managed-by": "vc-1",
                            QUEUE: "lq-shared"}, None),
    ("shared", "in-vcluster", {"vcluster.loft.sh/managed-by": "vc-1"}, ("ReplicaSet", "orphan-9c")),
    ("research", "queued", {QUEUE: "lq-gpu"}, ("Job", "train-0")),
    ("research", "queued-bare", {QUEUE: "lq-bare"}, ("ReplicaSet", "web-5f7")),
    ("research", "queue-without-cluster-queue", {QUEUE: "lq-gone"}, None),
    ("research", "queue-not-there", {QUEUE: "lq-missing"}, None),
    ("oil-dev", "capsuled", {}, ("StatefulSet", "db")),
    ("finance", "nightly", {}, ("Job", "nightly-28001")),
    ("plain", "bare", {}, None),
]


def _pod(namespace: str, name: str, labels: dict[str, str], owner: tuple[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": namespace, "name": name, "uid": f"uid-{name}", "labels": labels}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    limits = {"nvidia.com/gpu": "1"}
    return {"metadata": meta, "status": {"phase": "Running"},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "resources": {"limits": limits}}]}}


def _cluster(api: FakeKubernetesApi) -> None:
    lists: dict[str, list[dict[str, Any]]] = {
        "/api/v1/pods": [_pod(*p) for p in PODS],
        "/api/v1/namespaces": [{"metadata": {"name": n, "labels": labels}} for n, labels in NAMESPACES.items()],
        f"{KUEUE}/localqueues": [{"metadata": {"namespace": ns, "name": lq}, "spec": {"clusterQueue": cq}}
                                 for (ns, lq), cq in LOCAL_QUEUES.items()],
        f"{KUEUE}/clusterqueues": [{"metadata": {"name": cq, "labels": labels}} for cq, labels in CLUSTER_QUEUES.items()],
    }
    for path in ("/api/v1/nodes", "/api/v1/resourcequotas", "/apis/networking.k8s.io/v1/networkpolicies",
                 f"{KUEUE}/resourceflavors"):
        lists[path] = []
    for path, items in lists.items():
        api.objects[path] = {"kind": "List", "items": items}
    for ns in api.objects["/api/v1/namespaces"]["items"]:
        api.objects[f"/api/v1/namespaces/{ns['metadata']['name']}"] = ns
    for lq in api.objects[f"{KUEUE}/localqueues"]["items"]:
        api.objects[f"{KUEUE}/namespaces/{lq['metadata']['namespace']}/localqueues/{lq['metadata']['name']}"] = lq
    for cq in api.objects[f"{KUEUE}/clusterqueues"]["items"]:
        api.objects[f"{KUEUE}/clusterqueues/{cq['metadata']['name']}"] = cq
    for (kind, ns, name), parent in OWNERS.items():
        plural = {"ReplicaSet": "apps/v1/namespaces/{}/replicasets", "Job": "batch/v1/namespaces/{}/jobs"}[kind]
        api.add_owner(f"/apis/{plural.format(ns)}/{name}", parent)


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeKubernetesApi]:
    with FakeKubernetesApi() as api:
        _cluster(api)
        yield api


def exporter_view(api: FakeKubernetesApi, config: TenancyConfig) -> dict[tuple[str, str], tuple[Any, ...]]:
    with KubernetesClient(api.url) as client:
        resolver = TenantResolver(client, NODE, config, clock=lambda: 0.0)
        infos = [resolver.resolve(ns, name) for ns, name, _, _ in PODS]
        assert resolver.take_errors() == {}
    return {(i.namespace, i.name): (i.tenant, i.queue, i.workload_kind, i.workload_name) for i in infos}


def collector_view(api: FakeKubernetesApi, config: TenancyConfig) -> dict[tuple[str, str], tuple[Any, ...]]:
    with KubernetesClient(api.url) as client:
        pods = snapshot_frames(client, 0.0, config)["pod_snapshots"]
    return {(r["namespace"], r["pod"]): (r["tenant"], r["queue"], r["workload_kind"], r["workload_name"])
            for r in pods.iter_rows(named=True)}


def test_with_the_default_rules_every_rule_answers_for_some_pod_and_both_sides_agree(
        cluster: FakeKubernetesApi) -> None:
    config = TenancyConfig()
    with KubernetesClient(cluster.url) as client:
        resolver = TenantResolver(client, NODE, config, clock=lambda: 0.0)
        rules = {(ns, name): resolver.resolve(ns, name).rule for ns, name, _, _ in PODS}
    assert set(rules.values()) == {k.value for k in RuleKind}
    exporter = exporter_view(cluster, config)
    assert exporter == collector_view(cluster, config)
    assert {pod: (tenant, kind, name) for pod, (tenant, _q, kind, name) in exporter.items()} == {
        ("shared", "labelled"): ("vision", "Pod", "labelled"),
        ("shared", "in-vcluster"): ("vc-1", "ReplicaSet", "orphan-9c"),  # owner not found: the pod's own owner
        ("research", "queued"): ("research-team", "JobSet", "train"),  # the ClusterQueue's tenant label
        ("research", "queued-bare"): ("cq-bare", "Deployment", "web"),  # an unlabelled ClusterQueue: its name
        ("research", "queue-without-cluster-queue"): ("cq-deleted", "Pod", "queue-without-cluster-queue"),
        ("research", "queue-not-there"): ("research", "Pod", "queue-not-there"),
        ("oil-dev", "capsuled"): ("oil", "StatefulSet", "db"),
        ("finance", "nightly"): ("finance-team", "CronJob", "nightly"),
        ("plain", "bare"): ("plain", "Pod", "bare"),
    }


RULES = st.lists(st.sampled_from(list(RuleKind)), min_size=1, max_size=len(RuleKind), unique=True)
KEYS = st.sampled_from([None, "team", "gpulens.io/tenant", "capsule.clastix.io/tenant"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=RULES, keys=st.lists(KEYS, min_size=len(RuleKind), max_size=len(RuleKind)),
       cq_label=st.sampled_from(["gpulens.io/tenant", "team"]), first=st.sampled_from(["v1beta1", "v1beta2"]))
def test_any_rule_order_keys_and_kueue_version_give_each_pod_one_tenant_and_one_owner(
        cluster: FakeKubernetesApi, kinds: list[RuleKind], keys: list[str | None], cq_label: str, first: str) -> None:
    config = TenancyConfig(rules=[Rule(kind=k, key=key if k not in (RuleKind.NAMESPACE, RuleKind.KUEUE) else None)
                                  for k, key in zip(kinds, keys, strict=False)],
                           cluster_queue_tenant_label=cq_label, kueue_api_version=first)
    assert exporter_view(cluster, config) == collector_view(cluster, config)
