"""Cluster inventory through gpulens's Kubernetes client against FakeKubernetesApi (real HTTP)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.inventory import collect_inventory, parse_quantity
from collector.store import Store
from gpulens.core.kube_api import KubernetesClient
from tests.fakes.kubernetes_api import FakeKubernetesApi

NOW = 1_790_000_000.0


def _ns(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def _pod(ns: str, name: str, gpus: dict[str, str], labels: dict[str, str] | None = None,
         owner: tuple[str, str] | None = None, node: str = "gpu-node-1") -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": ns, "name": name, "uid": f"uid-{name}", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {"limits": gpus, "requests": {
            "cpu": "2"}}}]},
        "status": {"phase": "Running"},
    }


CLUSTER: dict[str, list[dict[str, Any]]] = {
    "/api/v1/namespaces": [
        _ns("team-a", **{"gpulens.io/tenant": "alpha"}),
        _ns("team-b", **{"capsule.clastix.io/tenant": "beta"}),
        _ns("vc-x", **{"vcluster.loft.sh/managed-by": "vcluster-x"}),
        _ns("default"),
    ],
    "/api/v1/pods": [
        _pod("team-a", "infer-7d9f5-abcde", {"nvidia.com/mig-1g.18gb": "2"},
             {"pod-template-hash": "7d9f5"}, ("ReplicaSet", "infer-7d9f5")),
        _pod("team-b", "train-0", {"nvidia.com/gpu": "8"}, {"kueue.x-k8s.io/queue-name": "lq-b"},
             ("Job", "train")),
        _pod("default", "web", {}, owner=("ReplicaSet", "web-1")),
    ],
    "/api/v1/nodes": [
        {"metadata": {"name": "gpu-node-1", "labels": {
            "nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/mig.config": "all-1g.18gb", "karpenter.sh/nodepool": "h200-mig"}},
         "status": {"allocatable": {"nvidia.com/mig-1g.18gb": "7"}}},
        {"metadata": {"name": "cpu-node-1", "labels": {}}, "status": {"allocatable": {"cpu": "32"}}},
    ],
    "/api/v1/resourcequotas": [
        {"metadata": {"namespace": "team-a", "name": "gpu-quota"},
         "spec": {"hard": {"requests.nvidia.com/gpu": "4", "requests.cpu": "64"}},
         "status": {"used": {"requests.nvidia.com/gpu": "2", "requests.cpu": "10"}}},
    ],
    "/apis/networking.k8s.io/v1/networkpolicies": [
        {"metadata": {"namespace": "team-a", "name": "deny-all"}},
        {"metadata": {"namespace": "team-a", "name": "allow-dns"}},
    ],
    "/apis/kueue.x-k8s.io/v1beta2/clusterqueues": [
        {"metadata": {"name": "cq-b", "labels": {"gpulens.io/tenant": "beta"}},
         "spec": {"cohortName": "ai-factory", "resourceGroups": [{
             "coveredResources": ["nvidia.com/gpu", "nvidia.com/mig-1g.18gb"],
             "flavors": [{"name": "h200-mig", "resources": [
                 {"name": "nvidia.com/mig-1g.18gb", "nominalQuota": 14, "borrowingLimit": 7, "lendingLimit": 7},
                 {"name": "nvidia.com/gpu", "nominalQuota": "2"}]}]}]},
         "status": {"flavorsUsage": [{"name": "h200-mig", "resources": [
             {"name": "nvidia.com/gpu", "total": "1", "borrowed": "0"}]}]}},
    ],
    "/apis/kueue.x-k8s.io/v1beta2/localqueues": [
        {"metadata": {"namespace": "team-b", "name": "lq-b"}, "spec": {"clusterQueue": "cq-b"},
         "status": {"flavorsUsage": [{"name": "h200-mig", "resources": [{"name": "nvidia.com/gpu", "total": "1"}]}]}},
    ],
}


OWNERS = {  # the objects that own the pods above, as the API serves them
    "/apis/apps/v1/namespaces/team-a/replicasets/infer-7d9f5": ("Deployment", "infer"),
    "/apis/batch/v1/namespaces/team-b/jobs/train": ("JobSet", "train-set"),
}


def serve(fake: FakeKubernetesApi, lists: dict[str, list[dict[str, Any]]]) -> None:
    for path, items in lists.items():
        fake.objects[path] = {"kind": "List", "items": items}
    for path, owner in OWNERS.items():
        fake.add_owner(path, owner)


@pytest.fixture
def api_server() -> Iterator[FakeKubernetesApi]:
    with FakeKubernetesApi() as fake:
        serve(fake, CLUSTER)
        yield fake


def _api(url: str) -> KubernetesClient:
    return KubernetesClient(url)


def test_quantities_parse_like_kubernetes() -> None:
    assert [parse_quantity(q) for q in ("4", "500m", "80Gi", 7, None, "bogus")] == [
        4.0, 0.5, 80 * 2**30, 7.0, None, None]


def test_inventory_snapshot_fills_the_inventory_tables(tmp_path: Path, api_server: FakeKubernetesApi) -> None:
    url = api_server.url
    with Store(str(tmp_path / "s.duckdb")) as store:
        collect_inventory(store, _api(url), clock=lambda: NOW)
        assert store.query("SELECT namespace, tenant, network_policies, virtual_cluster FROM namespace_snapshots "
                           "ORDER BY namespace") == [
            ("default", "default", 0, None), ("team-a", "alpha", 2, None), ("team-b", "beta", 0, None),
            ("vc-x", "vc-x", 0, "vcluster-x")]
        pods = store.query("SELECT pod, tenant, queue, workload_kind, workload_name, gpu_requests, node "
                           "FROM pod_snapshots ORDER BY pod")
        assert [p[:5] for p in pods] == [
            ("infer-7d9f5-abcde", "alpha", None, "Deployment", "infer"),
            ("train-0", "beta", "lq-b", "JobSet", "train-set")]
        assert json.loads(pods[0][5]) == {"nvidia.com/mig-1g.18gb": 2.0}
        quotas = store.query("SELECT object_kind, object_namespace, object_name, tenant, flavor, resource, "
                             "nominal_quota, borrowing_limit, lending_limit, usage FROM quota_snapshots ORDER BY ALL")
        assert quotas == [
            ("ClusterQueue", "", "cq-b", "beta", "h200-mig", "nvidia.com/gpu", 2.0, None, None, 1.0),
            ("ClusterQueue", "", "cq-b", "beta", "h200-mig", "nvidia.com/mig-1g.18gb", 14.0, 7.0, 7.0, None),
            ("LocalQueue", "team-b", "lq-b", "beta", "h200-mig", "nvidia.com/gpu", None, None, None, 1.0),
            ("ResourceQuota", "team-a", "gpu-quota", "alpha", "", "nvidia.com/gpu", 4.0, None, None, 2.0),
        ]
        assert store.query("SELECT node, pool, gpu_model, sharing_mode FROM nodes") == [
            ("gpu-node-1", "h200-mig", "NVIDIA-H200", "mig")]
        assert store.query("SELECT tenant, virtual_cluster FROM tenants ORDER BY tenant") == [
            ("alpha", None), ("beta", None), ("default", None), ("vc-x", "vcluster-x")]
        again = collect_inventory(store, _api(url), clock=lambda: NOW)
        assert again.total_rows == 0


def test_a_cluster_without_kueue_still_gives_the_rest(tmp_path: Path) -> None:
    with FakeKubernetesApi() as fake, Store(str(tmp_path / "s.duckdb")) as store:
        serve(fake, {k: v for k, v in CLUSTER.items() if "kueue" not in k})
        collect_inventory(store, _api(fake.url), clock=lambda: NOW)
        assert store.query("SELECT DISTINCT object_kind FROM quota_snapshots") == [("ResourceQuota",)]
    paths = {r.path for r in fake.requests}
    assert {"/apis/kueue.x-k8s.io/v1beta1/clusterqueues", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"} <= paths


def test_collect_kubernetes_command_uses_the_kubeconfig(tmp_path: Path, api_server: FakeKubernetesApi) -> None:
    kubeconfig = api_server.kubeconfig(tmp_path, token="t")
    db = tmp_path / "s.duckdb"
    proc = subprocess.run([sys.executable, "-m", "gpulens.cli", "collect", "--kubernetes", "--kubeconfig",
                           str(kubeconfig), "--db", str(db)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "pod_snapshots +2" in proc.stderr
    assert {r.headers.get("authorization") for r in api_server.requests} == {"Bearer t"}
    bad = subprocess.run([sys.executable, "-m", "gpulens.cli", "collect", "--kubernetes", "--kubeconfig",
                          str(tmp_path / "missing"), "--db", str(db)], capture_output=True, text=True,
                         timeout=120, check=False)
    assert bad.returncode == 2
    assert bad.stderr.startswith("gpulens: error: cannot load kubeconfig ")
    assert len(bad.stderr.strip().splitlines()) == 1
