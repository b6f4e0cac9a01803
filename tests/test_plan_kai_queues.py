"""`gpulens plan` on KAI Scheduler and Volcano queues: one pool per KAI parent queue, the top level sharing the
cluster's GPUs, the rules of a Kueue pool in each, a child's raise beyond its parent refused, KAI queues written
through the KAI writer (dry run by default, cuts before raises, one outcome per object), Volcano never written."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from analytics.plan.fleet import plan_store
from analytics.plan.model import FleetPlan, PoolPlan, QueuePlan
from analytics.plan.policy import CapacityFile, PlanPolicy
from collector.queue_systems import KAI_QUEUE, VOLCANO_QUEUE, pending_queue
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.cli import gpulens
from tests.support.recommend_store import StoreBuilder

DAYS = 15 * 288
NOW = datetime(2026, 11, 16)
QUEUES = "/apis/scheduling.run.ai/v2/queues"
GPU = "nvidia.com/gpu"


def kai_store(path: Path, queues: list[tuple[str, float | None, float, str | None, float]], *, nodes: int = 3,
              kind: str = KAI_QUEUE) -> Path:
    """``nodes`` nodes of 8 H100s; per queue (name, quota, GPUs in use for 15 days, parent, GPUs pending the last day)."""
    s = StoreBuilder(path)
    for n in range(nodes):
        for g in range(8):
            s.device(f"n{n}g{g}", "H100", node=f"node-{n}")
    for name, quota, used, parent, pending in queues:
        notes = {"parentQueue": parent} if parent else {}
        s.quota(kind, name, GPU, tenant=name, nominal=quota, usage=[used] * DAYS,  # type: ignore[arg-type]
                annotations={**notes, "quota": "unlimited"} if quota is None else notes)
        if pending:
            s.pending(name, GPU, dict.fromkeys(range(DAYS - 288, DAYS), pending),
                      cluster_queue=pending_queue(kind, name))
    return s.save()


TREE = [
    ("dept-a", 8, 8, None, 4.0),  # full, work waiting: a raise
    ("dept-b", 8, 2, None, 0.0),  # 2 of 8 used for 15 days: a cut
    ("team-a1", 4, 4, "dept-a", 4.0),  # full, work waiting: asks more than dept-a leaves
    ("team-a2", 4, 4, "dept-a", 0.0),
]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return kai_store(tmp_path_factory.mktemp("kai-plan") / "store.duckdb", TREE)


def make(db: Path, capacity: CapacityFile | None = None) -> FleetPlan:
    return plan_store(db, PlanPolicy(), capacity=capacity, store=False, clock=lambda: NOW)


def pool(plan: FleetPlan, name: str) -> PoolPlan:
    return next(p for p in plan.pools if p.pool.flavor == name)


def queue(plan: FleetPlan, name: str) -> QueuePlan:
    return next(q for p in plan.pools for q in p.queues if q.demand.queue == name)


def test_top_level_kai_queues_share_the_clusters_gpus_from_the_inventory_less_the_reserve(tree: Path) -> None:
    plan = make(tree)
    top = pool(plan, "kai")
    assert (top.pool.physical, top.reserve, top.available) == (24, 8, 16)  # 3 nodes of 8; n+1 keeps one node
    assert {q.demand.queue for q in top.queues} == {"dept-a", "dept-b"}
    assert top.planned_total <= top.available


def test_capacity_file_pool_kai_replaces_the_inventory_count(tree: Path) -> None:
    plan = make(tree, CapacityFile(flavors={"kai": {GPU: 12}}, largest_node={"kai": {GPU: 4}}))
    top = pool(plan, "kai")
    assert (top.pool.physical, top.pool.source, top.available) == (12, "capacity file", 8)


def test_cuts_and_raises_of_the_top_level_follow_the_kueue_rules(tree: Path) -> None:
    plan = make(tree)
    a, b = queue(plan, "dept-a"), queue(plan, "dept-b")
    assert (b.demand.current, b.planned, b.binding) == (8, 6, "step")  # a confident cut, one step
    assert (a.demand.current, a.planned) == (8, 10)  # the waiting queue is raised, one step


def test_children_share_the_smaller_of_their_parents_current_and_planned_quota(tree: Path) -> None:
    plan = make(tree)
    children = pool(plan, "kai:dept-a")
    assert children.pool.physical == min(8, queue(plan, "dept-a").planned) == 8
    assert children.reserve == 0  # the top level keeps the reserve
    assert children.planned_total <= 8
    assert "the smaller of current 8 and planned 10" in children.pool.source


def test_a_childs_raise_beyond_its_parents_quota_is_refused_with_the_reason(tree: Path) -> None:
    a1 = queue(make(tree), "team-a1")
    assert a1.demand.demand is not None and a1.demand.demand > 4  # it asks for more
    assert (a1.planned, a1.binding) == (4, "parent")
    assert "the children of KAI queue dept-a share its quota (8); the raise beyond it is refused" in a1.explanation


def test_a_child_is_cut_with_its_parent_but_never_below_what_has_pending_work(tmp_path: Path) -> None:
    db = kai_store(tmp_path / "cut.duckdb", [
        ("dept-b", 8, 2, None, 0.0), ("team-b1", 4, 0, "dept-b", 0.0), ("team-b2", 3, 1, "dept-b", 1.0),
    ])
    plan = make(db)
    children = pool(plan, "kai:dept-b")
    assert children.pool.physical == queue(plan, "dept-b").planned == 6
    assert queue(plan, "team-b2").planned == 3  # work pending: no cut
    assert queue(plan, "team-b1").planned == 3  # one step down: the children fit the parent's new quota (3 + 3)


def test_a_kai_pool_in_conflict_keeps_its_quotas_and_the_other_pools_are_still_planned(tmp_path: Path) -> None:
    db = kai_store(tmp_path / "conflict.duckdb", [
        ("dept-a", 8, 8, None, 4.0), ("dept-b", 8, 2, None, 0.0),
        ("team-b1", 8, 2, "dept-b", 1.0),  # pending work holds 8 under a parent cut to 6
        ("orphan", 2, 1, "gone", 0.0),
    ])
    plan = make(db)
    children = pool(plan, "kai:dept-b")
    assert children.conflict is not None and children.conflict.shortfall == 2
    assert queue(plan, "team-b1").planned == 8
    assert pool(plan, "kai").conflict is None and queue(plan, "dept-a").planned == 10
    assert [d.queue for d in plan.unplanned] == ["orphan"]
    assert any("orphan" in n and "its parent queue gone is not a planned KAI queue" in n for n in plan.notes)


def test_a_dry_run_writes_each_changed_kai_queue_and_applies_nothing(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = gpulens("plan", "--db", str(tree), "--out", str(out), "--no-store")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = sorted(p.name for p in out.iterdir() if not p.name.endswith(".rollback.yaml"))
    assert files == ["queue.scheduling.run.ai-dept-a.yaml", "queue.scheduling.run.ai-dept-b.yaml"]
    body = yaml.safe_load((out / "queue.scheduling.run.ai-dept-b.yaml").read_text())
    assert (body["kind"], body["spec"]) == ("Queue", {"resources": {"gpu": {"quota": 6}}})
    assert "dry run: nothing applied" in proc.stdout
    assert "kai:dept-a nvidia.com/gpu: 8 units" in proc.stdout


def live_queue(name: str, quota: float, allocated: float, requested: float) -> dict[str, Any]:
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name},
            "spec": {"resources": {"gpu": {"quota": quota, "limit": -1, "overQuotaWeight": 1}}},
            "status": {"allocated": {GPU: str(allocated)}, "requested": {GPU: str(requested)}}}


def apply(tree: Path, tmp_path: Path, fake: FakeKubernetesApi) -> str:
    for name, quota, used, _, pending in TREE:
        fake.put(f"{QUEUES}/{name}", live_queue(name, quota, used, used + pending))
    proc = gpulens("plan", "--db", str(tree), "--out", str(tmp_path / "o"), "--no-store", "--apply",
                   "--kubeconfig", str(fake.kubeconfig(tmp_path)))
    return proc.stdout + proc.stderr


def test_apply_writes_kai_queues_cuts_first_with_an_outcome_per_queue(tree: Path, tmp_path: Path) -> None:
    with FakeKubernetesApi() as fake:
        said = apply(tree, tmp_path, fake)
        patches = [r.path for r in fake.requests_to("PATCH")]
        gpu_b = fake.objects[f"{QUEUES}/dept-b"]["spec"]["resources"]["gpu"]
    assert f"{KAI_QUEUE} dept-b: APPLIED" in said and f"{KAI_QUEUE} dept-a: APPLIED" in said, said
    assert patches == [f"{QUEUES}/dept-b", f"{QUEUES}/dept-a"]  # the cut before the raise
    assert gpu_b == {"quota": 6, "limit": -1, "overQuotaWeight": 1}


def test_a_kai_raise_is_refused_when_the_cut_that_pays_for_it_does_not_land(tree: Path, tmp_path: Path) -> None:
    with FakeKubernetesApi() as fake:
        fake.fail("PATCH", f"{QUEUES}/dept-b", 500, times=None)
        said = apply(tree, tmp_path, fake)
        patched = {r.path for r in fake.requests_to("PATCH")}
    assert f"{QUEUES}/dept-a" not in patched
    assert f"{KAI_QUEUE} dept-a: REFUSED" in said and f"the cut of {KAI_QUEUE} dept-b (failed)" in said, said


def test_volcano_queues_are_planned_and_shown_but_never_written(tmp_path: Path) -> None:
    db = kai_store(tmp_path / "volcano.duckdb", [("research", 8, 2, None, 0.0), ("prod", 4, 4, None, 2.0)],
                   nodes=3, kind=VOLCANO_QUEUE)
    out = tmp_path / "out"
    proc = gpulens("plan", "--db", str(db), "--out", str(out), "--no-store")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "volcano nvidia.com/gpu: 24 units (inventory)" in proc.stdout
    assert "research" in proc.stdout and "prod" in proc.stdout
    assert "Volcano queues are planned and shown, never written" in proc.stdout
    assert list(out.iterdir()) == []


def test_a_tenants_budget_caps_its_kai_queue(tree: Path, tmp_path: Path) -> None:
    price = pool(make(tree), "kai").pool.unit_price_month
    assert price
    policy = PlanPolicy(tenants={"dept-a": {"monthly_budget_usd": price * 9.5}})  # type: ignore[dict-item]
    a = queue(plan_store(tree, policy, store=False, clock=lambda: NOW), "dept-a")
    assert (a.planned, a.binding) == (9, "budget")  # one step would give 10


def test_add_capacity_kai_is_a_what_if_on_the_top_level_pool(tree: Path) -> None:
    plan = plan_store(tree, PlanPolicy(), extra={("kai", GPU): 8}, store=False, clock=lambda: NOW)
    assert pool(plan, "kai").pool.physical == 32
    assert pool(make(tree), "kai").pool.physical == 24


def test_an_unlimited_kai_queue_is_not_planned_and_its_children_share_what_its_pool_has(tmp_path: Path) -> None:
    db = kai_store(tmp_path / "unlimited.duckdb", [
        ("default", None, 4, None, 0.0), ("dept-b", 8, 2, None, 0.0), ("team-x", 4, 4, "default", 2.0),
    ])
    plan = make(db)
    assert [d.queue for d in plan.unplanned] == ["default"]
    assert any("default" in n and "its KAI quota is -1 (unlimited)" in n for n in plan.notes)
    assert {q.demand.queue for q in pool(plan, "kai").queues} == {"dept-b"}
    assert pool(plan, "kai:default").pool.physical == pool(plan, "kai").available == 16
    assert queue(plan, "team-x").planned == 5  # the waiting child is raised one step


def test_apply_refuses_a_childs_raise_when_its_parents_live_quota_was_lowered_since(tmp_path: Path) -> None:
    queues = [("dept-a", 8, 8, None, 2.0), ("team-a1", 4, 4, "dept-a", 2.0), ("team-a2", 4, 1, "dept-a", 0.0)]
    db = kai_store(tmp_path / "drift.duckdb", queues)
    plan = make(db)
    assert (queue(plan, "team-a1").planned, queue(plan, "team-a2").planned) == (5, 3)  # fits dept-a's 8
    with FakeKubernetesApi() as fake:
        for name, quota, used, _, pending in queues:
            fake.put(f"{QUEUES}/{name}", live_queue(name, quota, used, used + pending))
        fake.put(f"{QUEUES}/dept-a", live_queue("dept-a", 6, 8, 10))  # someone lowered the parent
        proc = gpulens("plan", "--db", str(db), "--out", str(tmp_path / "o"), "--no-store", "--apply",
                       "--kubeconfig", str(fake.kubeconfig(tmp_path)))
        a1 = fake.objects[f"{QUEUES}/team-a1"]["spec"]["resources"]["gpu"]["quota"]
    said = proc.stdout + proc.stderr
    assert f"{KAI_QUEUE} team-a1: REFUSED: raise refused: the children of KAI queue dept-a were planned in 8 " \
        "GPU(s), but its live quota is 6 now" in said, said
    assert a1 == 4
    assert f"{KAI_QUEUE} team-a2: APPLIED" in said  # the cut still lands
