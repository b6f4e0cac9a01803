"""The quota plan on small pools a reader can check by hand (the worked example of docs/recommendations.md)."""

from __future__ import annotations

from analytics.plan.inputs import apply_capacity_file
from analytics.plan.model import PoolCapacity, QueueDemand
from analytics.plan.policy import CapacityFile, PlanPolicy, QueuePolicy, ReservePolicy, TenantPolicy
from analytics.plan.solve import budget_caps, reserve_for, solve_pool

GPU = "nvidia.com/gpu"
POOL = PoolCapacity("h100", GPU, 32, 1, nodes=4, largest_node=8, unit_price_month=2000.0)
WORKED = [
    QueueDemand("vc-a", "team-a", "h100", GPU, 8, 14, in_use=8, pending_now=4, pending_share=0.6, evidence_days=30),
    QueueDemand("vc-b", "team-b", "h100", GPU, 8, 12, in_use=7, evidence_days=30),
    QueueDemand("vc-c", "team-c", "h100", GPU, 8, 3, in_use=2, evidence_days=30),
    QueueDemand("vc-d", "team-d", "h100", GPU, 0, 6, pending_now=6, pending_share=1.0, evidence_days=30),
]
POLICY = PlanPolicy(queues={"vc-a": QueuePolicy(weight=2), "vc-d": QueuePolicy(guarantee=2)})


def _by_queue(plan) -> dict[str, tuple[int, int, str]]:  # type: ignore[no-untyped-def]
    return {q.demand.queue: (q.planned, q.target, q.binding) for q in plan.queues}


def test_the_worked_example_of_the_docs() -> None:
    plan = solve_pool(POOL, WORKED, POLICY)
    assert (plan.pool.capacity, plan.reserve, plan.available) == (31, 8, 23)
    assert _by_queue(plan) == {
        "vc-a": (9, 10, "reserve"),  # pending work: never cut; weight 2; one step up is 10
        "vc-b": (6, 5, "step"),  # no pending work: its fair share 5 is reached in steps of 2
        "vc-c": (6, 3, "step"),  # asks 3: cut to 3 over two applies
        "vc-d": (2, 5, "guarantee"),  # new queue with pending work: its guarantee of 2 at once
    }
    assert sum(q.planned for q in plan.queues) <= 23 and sum(q.target for q in plan.queues) <= 23
    vc_a = next(q for q in plan.queues if q.demand.queue == "vc-a")
    assert vc_a.explanation == "with a reserve of 0, vc-a gets +1"


def test_guarantees_beyond_capacity_are_a_conflict_with_amounts_and_nothing_planned() -> None:
    policy = PlanPolicy(queues={"vc-a": QueuePolicy(guarantee=20), "vc-b": QueuePolicy(guarantee=20)})
    busy = [QueueDemand(q, q, "h100", GPU, 8, 30, in_use=20, pending_now=4, evidence_days=30) for q in ("vc-a", "vc-b")]
    plan = solve_pool(POOL, busy, policy)
    assert plan.conflict is not None and plan.conflict.shortfall == 40 - 23
    assert "floors add up to 40 (guarantees 40) but capacity 31 (after 1 on drain candidates) - reserve 8 = 23" \
        in plan.conflict.lines[0]
    assert all(q.binding == "conflict" and q.planned == 8 for q in plan.queues)


def test_a_conflict_says_when_a_smaller_reserve_would_resolve_it() -> None:
    held = [QueueDemand(q, q, "h100", GPU, 14, 14, in_use=14, pending_now=1, evidence_days=30) for q in ("a", "b")]
    plan = solve_pool(POOL, held, PlanPolicy())
    assert plan.conflict is not None
    assert "no cut while work is pending 28" in plan.conflict.lines[0]
    assert "with a reserve of 3 (not 8) the floors would fit" in plan.conflict.lines


def test_a_budget_caps_the_queue_and_says_what_it_costs() -> None:
    demands = [QueueDemand("vc-a", "team-a", "h100", GPU, 8, 12, in_use=2, evidence_days=30)]
    policy = PlanPolicy(tenants={"team-a": TenantPolicy(monthly_budget_usd=20_000)}, max_step=1.0,
                        reserve=ReservePolicy(default=0))
    caps, notes = budget_caps(demands, {("h100", GPU): POOL}, policy)
    assert caps == {("vc-a", "h100", GPU): 10} and notes == []
    plan = solve_pool(POOL, demands, policy, {"vc-a": 10})
    q = plan.queues[0]
    assert (q.planned, q.binding, q.relax_gain) == (10, "budget", 2)


def test_no_price_means_the_budget_is_not_enforced_and_the_plan_says_so() -> None:
    unpriced = PoolCapacity("h100", GPU, 32)
    demands = [QueueDemand("vc-a", "team-a", "h100", GPU, 8, 12, evidence_days=30)]
    policy = PlanPolicy(tenants={"team-a": TenantPolicy(monthly_budget_usd=1)})
    caps, notes = budget_caps(demands, {("h100", GPU): unpriced}, policy)
    assert caps == {} and notes == ["budget of team-a not enforced on h100/nvidia.com/gpu: no price known"]


def test_reserve_rules() -> None:
    assert reserve_for(POOL, PlanPolicy())[0] == 8
    assert reserve_for(POOL, PlanPolicy(reserve=ReservePolicy(default="10%")))[0] == 4  # ceil(3.1)
    assert reserve_for(POOL, PlanPolicy(reserve=ReservePolicy(flavors={"h100": 2})))[0] == 2
    single = PoolCapacity("h100", GPU, 8, nodes=1, largest_node=8)
    assert reserve_for(single, PlanPolicy()) == (0, "n+1 impossible on a single node: 0 kept")
    unknown = PoolCapacity("h100", GPU, 8)
    assert reserve_for(unknown, PlanPolicy())[1].startswith("n+1 unknown")


def test_a_pool_dedicated_to_one_tenant_keeps_no_n_plus_1_unless_the_policy_names_its_flavor() -> None:
    dedicated = PoolCapacity("h100", GPU, 32, nodes=4, largest_node=8, dedicated_tenant="team-a")
    units, why = reserve_for(dedicated, PlanPolicy())
    assert units == 0 and why.startswith("every node dedicated to team-a, the only tenant a lost node hurts")
    assert reserve_for(dedicated, PlanPolicy(reserve=ReservePolicy(flavors={"h100": "n+1"})))[0] == 8
    assert reserve_for(dedicated, PlanPolicy(reserve=ReservePolicy(default="10%")))[0] == 4  # a share is kept
    counted = apply_capacity_file({("h100", GPU): dedicated}, CapacityFile(flavors={"h100": {GPU: 24}}))[("h100", GPU)]
    assert counted.physical == 24 and reserve_for(counted, PlanPolicy())[0] == 0  # --capacity keeps who the nodes are for


def test_a_queue_that_gets_all_it_asks_is_bound_by_demand() -> None:
    plan = solve_pool(PoolCapacity("h100", GPU, 100, nodes=4, largest_node=8),
                      [QueueDemand("vc-a", "t", "h100", GPU, 8, 9, in_use=8, pending_now=1, evidence_days=30)],
                      PlanPolicy())
    assert _by_queue(plan) == {"vc-a": (9, 9, "demand")}


def test_a_plan_over_other_evidence_gets_another_run_id_and_the_same_evidence_the_same() -> None:
    from dataclasses import replace
    from datetime import datetime

    from analytics.plan.fleet import run_id_of

    start, end = datetime(2026, 11, 1), datetime(2026, 12, 1)
    pools = {("h100", GPU): POOL}
    same = run_id_of(start, end, POLICY, pools, WORKED)
    assert run_id_of(start, end, POLICY, pools, list(reversed(WORKED))) == same  # order is not evidence
    late_samples = [replace(WORKED[0], demand=16, pending_now=6), *WORKED[1:]]
    assert run_id_of(start, end, POLICY, pools, late_samples) != same  # its record must not replace the first
