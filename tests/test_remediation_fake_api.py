"""The FakeKubernetesApi merges lists as the API server does: by each field's OpenAPI list type, per field manager."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpulens.core.kube_api import ConflictError, KubeConnection, KubernetesClient
from tests.fakes.kubernetes_api import FakeKubernetesApi

NODE = "/api/v1/nodes/n1"
QUOTA = "/api/v1/namespaces/a/resourcequotas/q"
CQ = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq"


def node() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"a": "1"}, "annotations": {"x": "1"}},
            "spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]}}


@pytest.fixture
def fake() -> Any:
    with FakeKubernetesApi() as api:
        api.put(NODE, node())
        yield api


def test_apply_without_force_conflicts_with_another_managers_different_value(fake: FakeKubernetesApi) -> None:
    with KubernetesClient(KubeConnection(fake.url, {})) as api, pytest.raises(ConflictError):
        api.apply(NODE, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"a": "2"}}},
                  force=False)
    assert fake.objects[NODE]["metadata"]["labels"] == {"a": "1"}


def test_apply_of_a_map_key_leaves_the_other_keys_of_the_map(fake: FakeKubernetesApi) -> None:
    with KubernetesClient(KubeConnection(fake.url, {})) as api:
        api.apply(NODE, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"b": "2"}}},
                  force=False)
        api.apply(NODE, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"c": "3"}}},
                  force=False)
    assert fake.objects[NODE]["metadata"]["labels"] == {"a": "1", "c": "3"}, "b was ours and left out: removed"


def test_a_map_list_merges_by_its_key_and_an_atomic_list_is_replaced(fake: FakeKubernetesApi) -> None:
    with KubernetesClient(KubeConnection(fake.url, {})) as api:
        api.apply(f"{NODE}/status", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                                     "status": {"conditions": [{"type": "GpuHealthy", "status": "False"}]}},
                  force=True)
        api.apply(NODE, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                         "spec": {"taints": [{"key": "mine", "effect": "NoSchedule"}]}}, force=True)
    stored = fake.objects[NODE]
    assert [c["type"] for c in stored["status"]["conditions"]] == ["Ready", "DiskPressure", "GpuHealthy"]
    assert stored["spec"]["taints"] == [{"key": "mine", "effect": "NoSchedule"}]


def test_a_merge_patch_replaces_lists_deletes_nulls_and_checks_the_resource_version(fake: FakeKubernetesApi) -> None:
    with KubernetesClient(KubeConnection(fake.url, {})) as api:
        rv = api.get(NODE)["metadata"]["resourceVersion"]
        api.merge_patch(NODE, {"metadata": {"resourceVersion": rv, "annotations": {"x": None, "y": "2"}},
                               "spec": {"taints": [{"key": "t", "effect": "NoExecute"}]}})
        with pytest.raises(ConflictError):
            api.merge_patch(NODE, {"metadata": {"resourceVersion": rv}, "spec": {"taints": None}})
    stored = fake.objects[NODE]
    assert stored["metadata"]["annotations"] == {"y": "2"} and stored["metadata"]["labels"] == {"a": "1"}
    assert stored["spec"]["taints"] == [{"key": "t", "effect": "NoExecute"}]


def test_an_update_replaces_the_object_but_not_its_status_and_needs_the_resource_version(fake: FakeKubernetesApi) -> None:
    with KubernetesClient(KubeConnection(fake.url, {})) as api:
        live = api.get(NODE)
    live["spec"] = {"unschedulable": True}
    live["status"] = {}
    without_version = {**live, "metadata": {k: v for k, v in live["metadata"].items() if k != "resourceVersion"}}
    assert httpx.put(fake.url + NODE, json=without_version).status_code == 422
    assert httpx.put(fake.url + NODE, json=live).status_code == 200
    stored = fake.objects[NODE]
    assert stored["spec"] == {"unschedulable": True}
    assert len(stored["status"]["conditions"]) == 2


def test_the_quota_objects_keep_their_list_types(fake: FakeKubernetesApi) -> None:
    fake.put(QUOTA, {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "a"},
                     "spec": {"hard": {"pods": "10", "requests.nvidia.com/gpu": "4"}}})
    groups = [{"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "h100", "resources": [
        {"name": "nvidia.com/gpu", "nominalQuota": 8}]}, {"name": "h200", "resources": []}]}]
    fake.put(CQ, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
                  "spec": {"resourceGroups": groups}})
    with KubernetesClient(KubeConnection(fake.url, {})) as api:
        api.apply(QUOTA, {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "a"},
                          "spec": {"hard": {"requests.nvidia.com/gpu": "2"}}}, force=True)
        api.apply(CQ, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "cq"},
                       "spec": {"resourceGroups": [{**groups[0], "flavors": groups[0]["flavors"][:1]}]}}, force=True)
    assert fake.objects[QUOTA]["spec"]["hard"] == {"pods": "10", "requests.nvidia.com/gpu": "2"}, "spec.hard is a map"
    assert [f["name"] for f in fake.objects[CQ]["spec"]["resourceGroups"][0]["flavors"]] == ["h100"], \
        "resourceGroups is atomic: the applied list replaces the stored one"


def test_a_collection_lists_the_objects_stored_under_it_filtered_by_labels(fake: FakeKubernetesApi) -> None:
    fake.put("/apis/g.io/v1/things/a", {"metadata": {"name": "a", "labels": {"app.kubernetes.io/managed-by": "gpulens"}}})
    fake.put("/apis/g.io/v1/things/b", {"metadata": {"name": "b", "labels": {}}})
    fake.put("/apis/g.io/v1/namespaces/ns/widgets/w", {"metadata": {"name": "w"}})
    with KubernetesClient(KubeConnection(fake.url, {})) as api:
        ours = api.get("/apis/g.io/v1/things", {"labelSelector": "app.kubernetes.io/managed-by=gpulens"})
        widgets = api.get("/apis/g.io/v1/widgets")
        api.delete("/apis/g.io/v1/things/a")
        left = api.get("/apis/g.io/v1/things")
    assert [i["metadata"]["name"] for i in ours["items"]] == ["a"]
    assert [i["metadata"]["name"] for i in widgets["items"]] == ["w"], "a cluster-wide list of a namespaced resource"
    assert [i["metadata"]["name"] for i in left["items"]] == ["b"]
