"""Capacity per flavor from the Kubernetes inventory: ResourceFlavors' nodeLabels select the flavor's nodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from analytics.plan.flavor_nodes import match_flavor_nodes
from collector.inventory import collect_inventory
from collector.store import Store
from gpulens.core.kube_api import KubernetesClient
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.test_collector_inventory import NOW, serve


def _node(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


CLUSTER: dict[str, list[dict[str, Any]]] = {
    "/api/v1/namespaces": [], "/api/v1/pods": [], "/api/v1/resourcequotas": [],
    "/apis/networking.k8s.io/v1/networkpolicies": [],
    "/api/v1/nodes": [
        _node("h100-a", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": "train"}),
        _node("h100-b", {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": "serve"}),
        _node("h200-a", {"nvidia.com/gpu.product": "NVIDIA-H200", "pool": "train"}),
    ],
    "/apis/kueue.x-k8s.io/v1beta2/resourceflavors": [
        {"metadata": {"name": "h100-train"},
         "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": "train"}}},
        {"metadata": {"name": "any-h100"}, "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}},
    ],
}


def test_resource_flavors_are_collected_and_select_their_nodes_by_labels(tmp_path: Path) -> None:
    with FakeKubernetesApi() as fake, Store(str(tmp_path / "s.duckdb")) as store:
        serve(fake, CLUSTER)
        collect_inventory(store, KubernetesClient(fake.url), clock=lambda: NOW)
        rows = {f: json.loads(labels) for f, labels in store.query("SELECT flavor, node_labels FROM resource_flavors")}
    assert rows["h100-train"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "pool": "train"}
    with duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True) as con:
        matched = match_flavor_nodes(con, ["h100-train", "any-h100", "unknown"])
    # h100-a satisfies both flavors' nodeLabels: a configuration error, counted in neither
    assert matched.members == {"h100-train": (), "any-h100": ("h100-b",), "unknown": ()}
    assert matched.conflicts == {"h100-a": ("any-h100", "h100-train")}
    assert matched.notes() == ["node h100-a matches flavors any-h100, h100-train (the nodeLabels of each select it): "
                               "a configuration error; its devices are counted in none of them"]
