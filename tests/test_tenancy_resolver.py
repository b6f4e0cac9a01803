"""Tenant resolution for each rule against FakeKubernetesApi (real HTTP), and hostile strings end to end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from exporter.allocations import KubeletAllocationSource
from exporter.cycle import CollectionCycle
from exporter.exposition import SnapshotCollector
from exporter.kubelet.client import PodResourcesClient
from exporter.nvml.source import NvmlDeviceSource
from gpulens.core.errors import UserError
from gpulens.core.kube_api import KubernetesClient
from gpulens.core.tenancy.resolver import TenantResolver
from gpulens.core.tenancy.rules import Rule, RuleKind, TenancyConfig, load_tenancy_config
from tests.fakes.kubelet import FakeKubelet, container, pod
from tests.fakes.kubernetes_api import ANY, FakeKubernetesApi
from tests.fakes.nvml import FakeNvml
from tests.fakes.nvml_captures import H100_NO_MIG, load_capture

NODE = "gpu-node-1"
KUEUE_LQ = "/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns}/localqueues/{name}"


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def api() -> Iterator[FakeKubernetesApi]:
    with FakeKubernetesApi() as fake:
        yield fake


def resolver(api: FakeKubernetesApi, config: TenancyConfig | None = None, clock: Clock | None = None) -> TenantResolver:
    return TenantResolver(KubernetesClient(api.url), NODE, config, clock=clock or Clock())


def test_a_pod_label_names_the_tenant_first(api: FakeKubernetesApi) -> None:
    api.add_pod("shared", "p", NODE, labels={"gpulens.io/tenant": "vision"})
    api.add_namespace("shared", {"gpulens.io/tenant": "platform"})
    info = resolver(api).resolve("shared", "p")
    assert (info.tenant, info.rule) == ("vision", "pod_label")


def test_kueue_queue_resolves_through_the_local_queue_to_its_cluster_queue(api: FakeKubernetesApi) -> None:
    api.add_pod("research", "job-abc", NODE, labels={"kueue.x-k8s.io/queue-name": "lq-gpu"})
    api.objects[KUEUE_LQ.format(ns="research", name="lq-gpu")] = {"spec": {"clusterQueue": "cq-research"}}
    info = resolver(api).resolve("research", "job-abc")
    assert (info.tenant, info.rule, info.queue) == ("cq-research", "kueue", "lq-gpu")


def test_a_cluster_queue_with_a_tenant_label_names_that_tenant_on_a_kueue_serving_only_v1beta2(
        api: FakeKubernetesApi) -> None:
    api.add_pod("research", "job-abc", NODE, labels={"kueue.x-k8s.io/queue-name": "lq-gpu"})
    api.objects["/apis/kueue.x-k8s.io/v1beta2/namespaces/research/localqueues/lq-gpu"] = {
        "spec": {"clusterQueue": "cq-research"}}
    api.objects["/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq-research"] = {
        "metadata": {"name": "cq-research", "labels": {"gpulens.io/tenant": "research-team"}}}
    r = resolver(api)
    info = r.resolve("research", "job-abc")
    assert (info.tenant, info.rule) == ("research-team", "kueue")
    assert r.take_errors() == {}, "a version the cluster does not serve (404) is not an error"


def test_vcluster_host_label_names_the_virtual_cluster(api: FakeKubernetesApi) -> None:
    api.add_pod("vc-team-x", "web-x-default-vcluster", NODE, labels={"vcluster.loft.sh/managed-by": "team-x"})
    assert resolver(api).resolve("vc-team-x", "web-x-default-vcluster").tenant == "team-x"


def test_capsule_tenant_label_on_the_namespace(api: FakeKubernetesApi) -> None:
    api.add_pod("oil-dev", "p", NODE)
    api.add_namespace("oil-dev", {"capsule.clastix.io/tenant": "oil"})
    info = resolver(api).resolve("oil-dev", "p")
    assert (info.tenant, info.rule) == ("oil", "capsule")


def test_namespace_label_then_namespace_name(api: FakeKubernetesApi) -> None:
    api.add_pod("ns-labelled", "p", NODE)
    api.add_namespace("ns-labelled", {"gpulens.io/tenant": "finance"})
    api.add_pod("plain", "p", NODE)
    api.add_namespace("plain")
    r = resolver(api)
    assert (r.resolve("ns-labelled", "p").tenant, r.resolve("plain", "p").rule) == ("finance", "namespace")
    assert r.resolve("plain", "p").tenant == "plain"


def test_rule_order_is_configurable(api: FakeKubernetesApi) -> None:
    api.add_pod("shared", "p", NODE, labels={"gpulens.io/tenant": "vision"})
    api.add_namespace("shared", {"team": "platform"})
    config = TenancyConfig(rules=[Rule(kind=RuleKind.NAMESPACE_LABEL, key="team"), Rule(kind=RuleKind.POD_LABEL)])
    assert resolver(api, config).resolve("shared", "p").tenant == "platform"


def test_owner_workload_walks_replicasets_and_jobs(api: FakeKubernetesApi) -> None:
    api.add_pod("a", "web-7d9-x", NODE, owner=("ReplicaSet", "web-7d9"))
    api.add_owner("/apis/apps/v1/namespaces/a/replicasets/web-7d9", ("Deployment", "web"))
    api.add_pod("a", "train-0", NODE, owner=("Job", "train-0"))
    api.add_owner("/apis/batch/v1/namespaces/a/jobs/train-0", ("JobSet", "train"))
    api.add_pod("a", "bare", NODE)
    r = resolver(api)
    assert (r.resolve("a", "web-7d9-x").workload_kind, r.resolve("a", "web-7d9-x").workload_name) == (
        "Deployment", "web")
    assert r.resolve("a", "train-0").workload_kind == "JobSet"
    assert r.resolve("a", "bare").workload_kind == "Pod"


def test_lookups_are_cached_and_scoped_to_this_node(api: FakeKubernetesApi) -> None:
    api.add_pod("a", "mine", NODE)
    api.add_pod("a", "other", "gpu-node-2")
    api.add_namespace("a")
    clock = Clock()
    r = resolver(api, clock=clock)
    for _ in range(5):
        r.resolve("a", "mine")
    pod_lists = api.requests_to("GET", "/api/v1/pods")
    assert len(pod_lists) == 1
    assert all(r.query == {"fieldSelector": "spec.nodeName=gpu-node-1"} for r in pod_lists)
    assert r.resolve("a", "other").uid is None, "pods of other nodes are not listed"


def test_lookups_of_objects_that_went_away_do_not_pile_up(api: FakeKubernetesApi) -> None:
    clock = Clock()
    r = resolver(api, TenancyConfig(cache_seconds=60), clock=clock)
    for hour in range(5):  # a node running a new batch of Jobs every hour, in a new namespace each time
        for i in range(10):
            api.add_pod(f"batch-{hour}", f"job-{hour}-{i}-0", NODE, owner=("Job", f"job-{hour}-{i}"))
        infos = [r.resolve(f"batch-{hour}", f"job-{hour}-{i}-0") for i in range(10)]
        assert {i.workload_kind for i in infos} == {"Job"}
        assert r.cached_lookups() == 11, "this hour's namespace and Jobs"
        clock.t += 3600


def test_an_unreachable_api_server_falls_back_to_the_namespace_and_counts(api: FakeKubernetesApi) -> None:
    api.fail(ANY, ANY, 500, times=None)
    r = resolver(api)
    assert r.resolve("team-z", "p").tenant == "team-z"
    assert r.take_errors()["tenants"] >= 1


def test_a_hanging_api_server_times_out_and_falls_back_to_the_namespace(api: FakeKubernetesApi) -> None:
    api.add_pod("team-h", "p", NODE, labels={"gpulens.io/tenant": "never-seen"})
    api.hang(ANY, ANY, seconds=10, times=None)
    r = TenantResolver(KubernetesClient(api.url, timeout_s=0.2), NODE, clock=Clock())
    assert (r.resolve("team-h", "p").tenant, r.take_errors()) == ("team-h", {"tenants": 2})  # pod list + namespace


def test_finished_pods_that_an_old_kubelet_still_lists_hold_no_device(
        api: FakeKubernetesApi, tmp_path: Path) -> None:
    gpu_uuid = "GPU-33333333-0000-0000-0000-000000000003"
    api.add_pod("ns", "done-job", NODE, phase="Succeeded")
    api.add_pod("ns", "running", NODE)
    fake = FakeNvml([load_capture(H100_NO_MIG, uuid=gpu_uuid)])
    devices = NvmlDeviceSource(fake, NODE, watch_xids=False)
    devices.read_devices(fake.now)
    with FakeKubelet(tmp_path) as kubelet:
        kubelet.pods = [pod("ns", "done-job", [container("c", "nvidia.com/gpu", [gpu_uuid])]),
                        pod("ns", "running", [container("c", "nvidia.com/gpu", [gpu_uuid])])]
        source = KubeletAllocationSource(PodResourcesClient(str(kubelet.socket)),
                                         directory=lambda: devices.directory, tenants=resolver(api))
        assert [a.pod for a in source.read_allocations(0.0)] == ["running"]
    devices.close()


def test_names_from_pods_and_labels_cannot_steer_a_lookup_to_another_path(api: FakeKubernetesApi) -> None:
    api.add_pod("ns", "p", NODE, labels={"kueue.x-k8s.io/queue-name": "../../../../../api/v1/secrets"},
                owner=("ReplicaSet", ".."))
    info = resolver(api).resolve("ns", "p")
    assert (info.tenant, info.rule, info.workload_kind) == ("ns", "namespace", "ReplicaSet")
    paths = {r.path for r in api.requests}
    assert paths == {"/api/v1/pods", "/api/v1/namespaces/ns",
                     "/apis/kueue.x-k8s.io/v1beta1/namespaces/ns/localqueues/..%2F..%2F..%2F..%2F..%2Fapi%2Fv1%2Fsecrets",
                     "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/localqueues/..%2F..%2F..%2F..%2F..%2Fapi%2Fv1%2Fsecrets",
                     "/apis/apps/v1/namespaces/ns/replicasets/%2E%2E"}


def test_bad_tenancy_yaml_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tenancy.yaml"
    path.write_text("rules:\n  - kind: nope\n")
    with pytest.raises(UserError, match="tenancy.yaml.*rules.0.kind"):
        load_tenancy_config(path)


def test_quotes_newlines_and_script_tags_come_out_escaped_in_the_exposition(
        api: FakeKubernetesApi, tmp_path: Path) -> None:
    hostile_tenant = 'te"am\n</script><script>alert(1)</script>'
    hostile_pod = 'po"d\\x\n</script>'
    gpu_uuid = "GPU-33333333-0000-0000-0000-000000000003"
    api.add_pod("ns", hostile_pod, NODE, labels={"gpulens.io/tenant": hostile_tenant})
    fake = FakeNvml([load_capture(H100_NO_MIG, uuid=gpu_uuid)])
    devices = NvmlDeviceSource(fake, NODE, watch_xids=False)
    with FakeKubelet(tmp_path) as kubelet:
        kubelet.pods = [pod("ns", hostile_pod, [container("c", "nvidia.com/gpu", [gpu_uuid])])]
        allocations = KubeletAllocationSource(PodResourcesClient(str(kubelet.socket)),
                                              directory=lambda: devices.directory, tenants=resolver(api))
        cycle = CollectionCycle(devices, allocations, node=NODE)
        cycle.run_once()
        cycle.run_once()
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(cycle.state, backend="nvml", version="test"))
    text = generate_latest(registry).decode()
    devices.close()
    assert "\n</script>" not in text, "a raw newline inside a label value would split the sample"
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = families["gpulens_allocation_gpu_equivalents"].samples
    assert [(s.labels["pod"], s.labels["tenant"]) for s in samples] == [(hostile_pod, hostile_tenant)]
