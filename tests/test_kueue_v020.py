"""Kueue 0.20 against FakeKubernetesApi serving only kueue.x-k8s.io/v1beta2 (v1beta1 answers 404): the served
version is discovered for reads and writes, a queue whose quotas an orchestrator sets (Dynamic Quota
Orchestration) is never written, and Kueue's own pod labels name the queue first."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from analytics.recommend import RecommendationReport, RecommendSettings, recommend, write_dry_run
from collector.inventory import collect_inventory
from collector.store import Store
from gpulens.core.kube_api import KubernetesClient
from gpulens.core.tenancy.resolver import TenantResolver
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.cli import gpulens
from tests.support.recommend_cluster import (
    CQ_V1BETA2,
    CUT_HISTORY,
    WEEK,
    build_writer_store,
    live_cluster_queue,
)
from tests.support.recommend_store import StoreBuilder
from tests.test_collector_inventory import CLUSTER, serve
from tests.test_writers_kube import outcome, patches, run_apply

NOW = datetime(2026, 11, 9, 12, 0)
KUEUE = "kueue.x-k8s.io"
SERVED = {"v1beta2": ["clusterqueues", "localqueues", "resourceflavors", "workloads"]}
V1BETA1 = f"/apis/{KUEUE}/v1beta1/"
ORCHESTRATED = {"effectiveQuotas": {
    "orchestratorRef": {"apiGroup": "quota.example.com", "kind": "CapacityOrchestrator", "name": "node-capacity"},
    "resourceGroups": [{"coveredResources": ["nvidia.com/gpu", "nvidia.com/mig-1g.18gb"], "flavors": [
        {"name": "h200-mig", "resources": [{"name": "nvidia.com/mig-1g.18gb", "nominalQuota": 6},
                                           {"name": "nvidia.com/gpu", "nominalQuota": 1}]}]}]}}


@pytest.fixture
def kueue_020() -> Iterator[FakeKubernetesApi]:
    """Kueue v0.20: the group serves v1beta2 only."""
    with FakeKubernetesApi() as fake:
        fake.serve_api_group(KUEUE, SERVED)
        yield fake


def inventory(fake: FakeKubernetesApi, tmp_path: Path, said: list[str] | None = None) -> duckdb.DuckDBPyConnection:
    """``collect --kubernetes`` into a new store (what it says about Kueue into ``said``)."""
    heard = {} if said is None else {"say": said.append}
    with Store(str(tmp_path / "inv.duckdb")) as store, KubernetesClient(fake.url) as api:
        collect_inventory(store, api, clock=lambda: 1_790_000_000.0, **heard)
    return duckdb.connect(str(tmp_path / "inv.duckdb"), read_only=True)


# -- reads ------------------------------------------------------------------------------------------------


def test_the_inventory_reads_the_version_discovery_serves_says_so_and_never_asks_for_a_gone_v1beta1(
        kueue_020: FakeKubernetesApi, tmp_path: Path) -> None:
    serve(kueue_020, CLUSTER)
    said: list[str] = []
    con = inventory(kueue_020, tmp_path, said)
    assert said == [f"Kueue API: {KUEUE}/v1beta2 (served: v1beta2; v1beta1 asked for, not served)"]
    assert not [r.path for r in kueue_020.requests if r.path.startswith(V1BETA1)]
    rows = con.execute("SELECT object_kind, object_name FROM quota_snapshots WHERE object_kind <> 'ResourceQuota' "
                       "GROUP BY ALL ORDER BY ALL").fetchall()
    assert rows == [("ClusterQueue", "cq-b"), ("LocalQueue", "lq-b")]


def test_a_cluster_without_kueue_discovery_is_probed_version_by_version_and_the_output_says_so(
        tmp_path: Path) -> None:
    with FakeKubernetesApi() as fake:
        serve(fake, CLUSTER)
        said: list[str] = []
        con = inventory(fake, tmp_path, said)
    assert said == [f"Kueue API: {KUEUE} discovery did not answer (not found); using v1beta1 "
                    "(readers try the other versions on 404)"]
    assert con.execute("SELECT count(*) FROM quota_snapshots WHERE object_name = 'cq-b'").fetchone() == (2,)


def test_an_orchestrated_queue_is_stored_with_its_effective_quotas_and_its_orchestrator(
        kueue_020: FakeKubernetesApi, tmp_path: Path) -> None:
    cluster = copy.deepcopy(CLUSTER)
    cluster[f"/apis/{KUEUE}/v1beta2/clusterqueues"][0]["status"].update(ORCHESTRATED)
    serve(kueue_020, cluster)
    con = inventory(kueue_020, tmp_path)
    rows = con.execute("SELECT resource, nominal_quota, annotations FROM quota_snapshots "
                       "WHERE object_name = 'cq-b' ORDER BY resource").fetchall()
    assert [(r, n) for r, n, _ in rows] == [("nvidia.com/gpu", 1.0), ("nvidia.com/mig-1g.18gb", 6.0)]  # spec: 2, 14
    assert {json.loads(a)["orchestrator"] for _, _, a in rows} == {"CapacityOrchestrator/node-capacity"}


# -- writes -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def writer_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_writer_store(tmp_path_factory.mktemp("v020") / "store.duckdb")


@pytest.fixture(scope="module")
def asked_v1beta1(writer_store: Path) -> RecommendationReport:
    return recommend(writer_store, RecommendSettings(kueue_version="v1beta1", targets=("kueue",)), clock=lambda: NOW)


@pytest.fixture(scope="module")
def asked_v1beta2(writer_store: Path) -> RecommendationReport:
    return recommend(writer_store, RecommendSettings(targets=("kueue",)), clock=lambda: NOW)


def test_apply_writes_the_version_the_cluster_serves_when_the_one_asked_for_is_gone(
        asked_v1beta1: RecommendationReport, kueue_020: FakeKubernetesApi) -> None:
    kueue_020.put(f"{CQ_V1BETA2}/team-a", live_cluster_queue("team-a"))
    done = run_apply(asked_v1beta1, kueue_020, record=False)
    assert outcome(done, "ClusterQueue team-a").startswith("applied")
    (req,) = patches(kueue_020, f"{CQ_V1BETA2}/team-a")
    assert req.body["apiVersion"] == f"{KUEUE}/v1beta2"
    assert not [r.path for r in kueue_020.requests if r.path.startswith(V1BETA1)]
    assert f"Kueue API: {KUEUE}/v1beta2 (served: v1beta2; v1beta1 asked for, not served)" in done.notes


def orchestrated(name: str) -> dict[str, Any]:
    obj = live_cluster_queue(name)
    obj["status"]["effectiveQuotas"] = {"orchestratorRef": {"kind": "CapacityOrchestrator", "name": "node-capacity"},
                                        "resourceGroups": obj["spec"]["resourceGroups"]}
    return obj


def test_a_queue_an_orchestrator_manages_is_refused_with_what_the_recommendation_would_be(
        asked_v1beta2: RecommendationReport, kueue_020: FakeKubernetesApi) -> None:
    kueue_020.put(f"{CQ_V1BETA2}/team-a", orchestrated("team-a"))
    done = run_apply(asked_v1beta2, kueue_020, record=False)
    assert outcome(done, "ClusterQueue team-a") == (
        "refused: managed by CapacityOrchestrator/node-capacity; the recommendation would be "
        "h100/nvidia.com/gpu 16 -> 12")
    assert patches(kueue_020, f"{CQ_V1BETA2}/team-a") == []


def test_a_dry_run_refuses_an_orchestrated_queue_too_and_writes_no_file_for_it(tmp_path: Path) -> None:
    s = StoreBuilder(tmp_path / "s.duckdb")
    s.quota("ClusterQueue", "team-a", "nvidia.com/gpu", flavor="h100", tenant="team-a", nominal=16,
            usage=[4 + (i % 4) for i in range(CUT_HISTORY)], first=WEEK - CUT_HISTORY,
            annotations={"orchestrator": "CapacityOrchestrator/node-capacity"})
    report = recommend(s.save(), RecommendSettings(targets=("kueue",)), clock=lambda: NOW)
    (plan,) = report.plans
    assert plan.changes, "the evidence asks for a change"
    written = write_dry_run(report, tmp_path / "out")
    assert [p.name for p in written] == ["gpuquotarecommendations.yaml"]
    assert ("  ClusterQueue team-a: refused: managed by CapacityOrchestrator/node-capacity; the recommendation "
            "would be h100/nvidia.com/gpu 16 -> 12") in report.render().splitlines()


# -- tenancy ----------------------------------------------------------------------------------------------

KUEUE_POD_LABELS = {"kueue.x-k8s.io/cluster-queue-name": "cq-b", "kueue.x-k8s.io/local-queue-name": "lq-b"}


def test_the_inventory_takes_the_queue_kueue_put_on_the_pod_first(kueue_020: FakeKubernetesApi,
                                                                   tmp_path: Path) -> None:
    cluster = copy.deepcopy(CLUSTER)
    gpu = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    cluster["/api/v1/pods"] = [
        {"metadata": {"namespace": "default", "name": "admitted", "labels": KUEUE_POD_LABELS}, "spec": gpu},
        {"metadata": {"namespace": "default", "name": "stale-queue-label", "labels": {
            **KUEUE_POD_LABELS, "kueue.x-k8s.io/queue-name": "lq-gone"}}, "spec": gpu},
    ]
    serve(kueue_020, cluster)
    con = inventory(kueue_020, tmp_path)
    rows = con.execute("SELECT pod, tenant, queue FROM pod_snapshots ORDER BY pod").fetchall()
    assert rows == [("admitted", "beta", "lq-b"), ("stale-queue-label", "beta", "lq-gone")]


def test_the_exporter_takes_the_queue_kueue_put_on_the_pod_without_a_local_queue_lookup(
        kueue_020: FakeKubernetesApi) -> None:
    kueue_020.add_pod("default", "admitted", "gpu-node-1", labels=KUEUE_POD_LABELS)
    kueue_020.objects[f"/apis/{KUEUE}/v1beta2/clusterqueues/cq-b"] = {
        "metadata": {"name": "cq-b", "labels": {"gpulens.io/tenant": "beta"}}}
    info = TenantResolver(KubernetesClient(kueue_020.url), "gpu-node-1").resolve("default", "admitted")
    assert (info.tenant, info.rule, info.queue) == ("beta", "kueue", "lq-b")
    assert not [r.path for r in kueue_020.requests if "/localqueues/" in r.path]


def test_plan_apply_and_its_live_totals_use_the_served_version_and_say_which(kueue_020: FakeKubernetesApi,
                                                                              tmp_path: Path) -> None:
    s = StoreBuilder(tmp_path / "plan.duckdb")
    s.quota("ClusterQueue", "team-a", "nvidia.com/gpu", flavor="h100", tenant="team-a", nominal=16,
            usage=[4 + (i % 4) for i in range(CUT_HISTORY)])
    s.quota("ClusterQueue", "team-b", "nvidia.com/gpu", flavor="h100", tenant="team-b", nominal=4,
            usage=[4] * CUT_HISTORY)
    s.pending("team-b", "nvidia.com/gpu", dict.fromkeys(range(CUT_HISTORY), 4.0), cluster_queue="team-b")
    capacity, policy = tmp_path / "capacity.yaml", tmp_path / "policy.yaml"
    capacity.write_text("flavors: {h100: {nvidia.com/gpu: 20}}\n")
    policy.write_text("kueue_version: v1beta1\n")
    kueue_020.put(f"{CQ_V1BETA2}/team-a", live_cluster_queue("team-a", gpus=10))  # moved: a partial apply
    kueue_020.put(f"{CQ_V1BETA2}/team-b", live_cluster_queue("team-b", gpus=4))
    proc = gpulens("plan", "--db", str(s.save()), "--capacity", str(capacity), "--policy", str(policy),
                   "--out", str(tmp_path / "o"), "--apply", "--kubeconfig", str(kueue_020.kubeconfig(tmp_path)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Kueue API: {KUEUE}/v1beta2 (served: v1beta2; v1beta1 asked for, not served)" in proc.stdout
    assert "ClusterQueue team-a: REFUSED: h100/nvidia.com/gpu: live value 10 differs" in proc.stdout
    assert "live totals after a partial apply" in proc.stdout and "not readable" not in proc.stdout
    assert not [r.path for r in kueue_020.requests if r.path.startswith(V1BETA1)]
