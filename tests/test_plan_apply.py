"""`gpulens plan --apply` against FakeKubernetesApi: server-side apply per ClusterQueue, one outcome per object."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.cli import gpulens
from tests.support.recommend_cluster import CQ_V1BETA2, live_cluster_queue
from tests.support.recommend_store import StoreBuilder

DAYS_15 = 15 * 288


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """team-a: 16 GPUs, uses 4-7, nothing pending for 15 days (a cut); team-b: 4 GPUs, full, 4 pending (a raise)."""
    s = StoreBuilder(tmp_path_factory.mktemp("apply") / "store.duckdb")
    s.quota("ClusterQueue", "team-a", "nvidia.com/gpu", flavor="h100", tenant="team-a", nominal=16,
            usage=[4 + (i % 4) for i in range(DAYS_15)])
    s.quota("ClusterQueue", "team-b", "nvidia.com/gpu", flavor="h100", tenant="team-b", nominal=4,
            usage=[4] * DAYS_15)
    s.pending("team-b", "nvidia.com/gpu", dict.fromkeys(range(DAYS_15), 4.0), cluster_queue="team-b")
    return s.save()


def test_apply_writes_each_clusterqueue_and_reports_an_outcome_per_object(store: Path, tmp_path: Path) -> None:
    capacity = tmp_path / "capacity.yaml"
    capacity.write_text("flavors: {h100: {nvidia.com/gpu: 20}}\n")
    with FakeKubernetesApi() as fake:
        fake.put(f"{CQ_V1BETA2}/team-a", live_cluster_queue("team-a", gpus=16))
        fake.put(f"{CQ_V1BETA2}/team-b", live_cluster_queue("team-b", gpus=4))
        proc = gpulens("plan", "--db", str(store), "--capacity", str(capacity), "--out", str(tmp_path / "o"),
                       "--apply", "--kubeconfig", str(fake.kubeconfig(tmp_path)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ClusterQueue team-a: APPLIED: h100/nvidia.com/gpu 16 -> 12" in proc.stdout
    assert "ClusterQueue team-b: APPLIED: h100/nvidia.com/gpu 4 -> 5" in proc.stdout
    patches = {r.path: r for r in fake.requests_to("PATCH")}
    assert set(patches) == {f"{CQ_V1BETA2}/team-a", f"{CQ_V1BETA2}/team-b"}
    body = patches[f"{CQ_V1BETA2}/team-a"].body
    resources = body["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    assert {r["name"]: r["nominalQuota"] for r in resources} == {"cpu": 100, "memory": "400Gi", "nvidia.com/gpu": 12}
    assert body["metadata"]["annotations"]["gpulens.io/applied-to"] == '{"h100/nvidia.com/gpu": 12}'


def test_apply_refuses_an_object_whose_live_value_moved_and_the_raises_its_cut_was_to_pay_for(
    store: Path, tmp_path: Path
) -> None:
    capacity = tmp_path / "capacity.yaml"
    capacity.write_text("flavors: {h100: {nvidia.com/gpu: 20}}\n")
    with FakeKubernetesApi() as fake:
        fake.put(f"{CQ_V1BETA2}/team-a", live_cluster_queue("team-a", gpus=10))  # someone changed it since
        fake.put(f"{CQ_V1BETA2}/team-b", live_cluster_queue("team-b", gpus=4))
        proc = gpulens("plan", "--db", str(store), "--capacity", str(capacity), "--out", str(tmp_path / "o"),
                       "--apply", "--kubeconfig", str(fake.kubeconfig(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert "ClusterQueue team-a: REFUSED: h100/nvidia.com/gpu: live value 10 differs from the evidence (16)" \
        in proc.stdout
    assert "ClusterQueue team-b: REFUSED: h100/nvidia.com/gpu: raise refused: the cut of ClusterQueue team-a " \
        "(refused) in this flavor did not land" in proc.stdout
    assert fake.requests_to("PATCH") == []


def test_every_dry_run_plan_file_has_its_rollback_with_todays_quotas_next_to_it(store: Path, tmp_path: Path) -> None:
    capacity = tmp_path / "capacity.yaml"
    capacity.write_text("flavors: {h100: {nvidia.com/gpu: 20}}\n")
    out = tmp_path / "o"
    proc = gpulens("plan", "--db", str(store), "--capacity", str(capacity), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr

    def gpus(name: str) -> int:
        body = yaml.safe_load((out / name).read_text())
        (quota,) = [r["nominalQuota"] for g in body["spec"]["resourceGroups"] for f in g["flavors"]
                    for r in f["resources"] if r["name"] == "nvidia.com/gpu"]
        return int(quota)

    assert sorted(p.name for p in out.glob("*.yaml")) == [
        "clusterqueue-team-a.rollback.yaml", "clusterqueue-team-a.yaml",
        "clusterqueue-team-b.rollback.yaml", "clusterqueue-team-b.yaml"]
    assert (gpus("clusterqueue-team-a.yaml"), gpus("clusterqueue-team-a.rollback.yaml")) == (12, 16)
    assert (gpus("clusterqueue-team-b.yaml"), gpus("clusterqueue-team-b.rollback.yaml")) == (5, 4)
    again = gpulens("plan", "--db", str(store), "--capacity", str(capacity), "--out", str(out))
    assert again.returncode == 0 and len(list(out.glob("*.yaml"))) == 4  # a new plan replaces its rollback files too
