"""A pool in conflict keeps its quotas and says why; it does not block the plans of the other pools."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
import yaml

from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.cli import gpulens
from tests.support.recommend_cluster import CQ_V1BETA2, gpu_nominal
from tests.support.recommend_store import StoreBuilder

DAYS_15 = 15 * 288
CAPACITY = "flavors: {h100: {nvidia.com/gpu: 20}, a100: {nvidia.com/gpu: 4}}\nlargest_node: {}\n"
"""h100 fits its queues; a100 (4 units) cannot hold team-c's 8, which work is pending on (no cut)."""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """team-a: 16 h100, uses 4-7, nothing pending (a cut); team-c: 4 h100 full with 4 pending (a raise) and
    8 a100 full with 4 pending, on a flavor of 4 units (a conflict)."""
    s = StoreBuilder(tmp_path_factory.mktemp("conflict") / "store.duckdb")
    s.quota("ClusterQueue", "team-a", "nvidia.com/gpu", flavor="h100", tenant="team-a", nominal=16,
            usage=[4 + (i % 4) for i in range(DAYS_15)])
    s.quota("ClusterQueue", "team-c", "nvidia.com/gpu", flavor="h100", tenant="team-c", nominal=4,
            usage=[4] * DAYS_15)
    s.quota("ClusterQueue", "team-c", "nvidia.com/gpu", flavor="a100", tenant="team-c", nominal=8,
            usage=[8] * DAYS_15)
    s.pending("team-c", "nvidia.com/gpu", dict.fromkeys(range(DAYS_15), 4.0), cluster_queue="team-c", flavor="h100")
    s.pending("team-c", "nvidia.com/gpu", dict.fromkeys(range(DAYS_15), 4.0), cluster_queue="team-c", flavor="a100")
    return s.save()


def _files(tmp_path: Path) -> tuple[Path, Path]:
    capacity = tmp_path / "capacity.yaml"
    capacity.write_text(CAPACITY)
    policy = tmp_path / "policy.yaml"
    policy.write_text("reserve: {default: 0}\n")
    return capacity, policy



def test_a_pool_in_conflict_keeps_its_quotas_while_the_other_pools_are_written_and_the_exit_status_says_so(
    store: Path, tmp_path: Path
) -> None:
    capacity, policy = _files(tmp_path)
    out = tmp_path / "plan"
    proc = gpulens("plan", "--db", str(store), "--capacity", str(capacity), "--policy", str(policy), "--out", str(out))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "a100 nvidia.com/gpu: 4 units (capacity file) - reserve 0 [0 unit(s)] = 4" in proc.stdout
    assert "CONFLICT (short 4): guarantees and holds: floors add up to 8 (no cut while work is pending 8)" \
        in proc.stdout
    assert "team-c keeps 8: guarantees and holds: floors add up to 8" in proc.stdout
    assert proc.stderr.strip() == ("gpulens: error: 1 flavor/resource pool(s) in conflict keep their quotas "
                                   "(a100/nvidia.com/gpu); the other pools are planned")
    written = sorted(p.name for p in out.glob("*.yaml") if not p.name.endswith(".rollback.yaml"))
    assert written == ["clusterqueue-team-a.yaml", "clusterqueue-team-c.yaml"]  # each with its rollback next to it
    team_a = yaml.safe_load((out / "clusterqueue-team-a.yaml").read_text())
    assert gpu_nominal(team_a, "h100") == 12  # the cut of the pool that fits: one step of 25%
    team_c = yaml.safe_load((out / "clusterqueue-team-c.yaml").read_text())
    assert gpu_nominal(team_c, "h100") == 5 and gpu_nominal(team_c, "a100") == 8  # a100 as it is
    assert team_c["metadata"]["annotations"]["gpulens.io/applied-to"] == '{"h100/nvidia.com/gpu": 5}'
    with duckdb.connect(str(store), read_only=True) as con:
        rows = con.execute("SELECT flavor, cluster_queue, planned_quota, binding_constraint, conflict IS NOT NULL "
                           "FROM quota_plan ORDER BY 1, 2").fetchall()
    assert rows == [("a100", "team-c", 8, "conflict", True), ("h100", "team-a", 12, "step", False),
                    ("h100", "team-c", 5, "step", False)]


def test_apply_sends_the_pools_that_fit_leaves_the_conflicting_entry_as_it_is_and_exits_with_the_conflict(
    store: Path, tmp_path: Path
) -> None:
    capacity, policy = _files(tmp_path)

    def queue(name: str, h100: int, a100: int, pending: int) -> dict:  # type: ignore[type-arg]
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name},
                "status": {"pendingWorkloads": pending},
                "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                    {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": h100}]},
                    {"name": "a100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": a100}]}]}]}}

    with FakeKubernetesApi() as fake:
        fake.put(f"{CQ_V1BETA2}/team-a", queue("team-a", 16, 0, 0))
        fake.put(f"{CQ_V1BETA2}/team-c", queue("team-c", 4, 8, 2))
        proc = gpulens("plan", "--db", str(store), "--capacity", str(capacity), "--policy", str(policy),
                       "--out", str(tmp_path / "o"), "--apply", "--kubeconfig", str(fake.kubeconfig(tmp_path)))
        team_c = fake.objects[f"{CQ_V1BETA2}/team-c"]
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "ClusterQueue team-a: APPLIED: h100/nvidia.com/gpu 16 -> 12" in proc.stdout
    assert "ClusterQueue team-c: APPLIED: h100/nvidia.com/gpu 4 -> 5" in proc.stdout
    assert gpu_nominal(team_c, "h100") == 5 and gpu_nominal(team_c, "a100") == 8
    assert "in conflict keep their quotas (a100/nvidia.com/gpu)" in proc.stderr
