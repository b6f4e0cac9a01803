"""Properties of the quota plan on any input: constraints hold, deterministic, more capacity never lowers a plan."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.plan.model import PoolCapacity, QueueDemand
from analytics.plan.policy import PlanPolicy, QueuePolicy, ReservePolicy
from analytics.plan.solve import solve_pool
from analytics.plan.waterfill import Claim, InfeasibleFloors, water_fill

weights = st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.0, 7.0])


@st.composite
def claims(draw: st.DrawFn) -> list[Claim]:
    n = draw(st.integers(1, 12))
    out = []
    for i in range(n):
        lo = draw(st.integers(0, 20))
        hi = lo + draw(st.integers(0, 60))
        out.append(Claim(f"q{i:02d}", lo, hi, draw(weights)))
    return out


@given(claims(), st.integers(0, 400))
def test_water_fill_keeps_bounds_and_capacity_and_leaves_nothing_idle_that_someone_asks_for(
    cs: list[Claim], capacity: int
) -> None:
    if sum(c.lo for c in cs) > capacity:
        with pytest.raises(InfeasibleFloors):
            water_fill(cs, capacity)
        return
    x = water_fill(cs, capacity)
    assert all(c.lo <= v <= c.hi for c, v in zip(cs, x, strict=True))
    assert sum(x) <= capacity
    assert sum(x) == min(capacity, sum(c.hi for c in cs))  # Pareto: capacity left only when every ask is met


@given(claims(), st.integers(0, 300), st.integers(1, 50))
def test_water_fill_more_capacity_never_lowers_a_share(cs: list[Claim], capacity: int, more: int) -> None:
    if sum(c.lo for c in cs) > capacity:
        return
    before, after = water_fill(cs, capacity), water_fill(cs, capacity + more)
    assert all(b <= a for b, a in zip(before, after, strict=True))


@given(claims(), st.integers(0, 300))
def test_water_fill_is_weighted_max_min_fair(cs: list[Claim], capacity: int) -> None:
    """No unit can move from a claimant to one with a lower next level without going below its own floor."""
    if sum(c.lo for c in cs) > capacity:
        return
    x = water_fill(cs, capacity)
    for i, a in enumerate(cs):
        for j, b in enumerate(cs):
            if i != j and x[i] > a.lo and x[j] < b.hi:
                # a's last unit was given at level x_i / w_a; b's next unit would be at (x_j + 1) / w_b
                assert x[i] / a.weight <= (x[j] + 1) / b.weight + 1e-9


def test_water_fill_weights_2_to_1_share_capacity_2_to_1() -> None:
    assert water_fill([Claim("a", 0, 100, 2.0), Claim("b", 0, 100, 1.0)], 30) == [20, 10]


def test_water_fill_gives_what_a_small_ask_leaves_to_the_others() -> None:
    """Gavel's example where one max-min LP leaves 6 idle: water-filling gives (5, 3, 4) of 12 (4.5, 3, 4.5 rounded)."""
    assert water_fill([Claim("a", 0, 10, 1.0), Claim("b", 0, 3, 2.0), Claim("c", 0, 10, 1.0)], 12) == [5, 3, 4]


@st.composite
def pools(draw: st.DrawFn) -> tuple[PoolCapacity, list[QueueDemand], PlanPolicy, dict[str, int | None]]:
    n = draw(st.integers(1, 8))
    demands, queue_policies, caps = [], {}, {}
    for i in range(n):
        name = f"vc{i}"
        current = draw(st.one_of(st.none(), st.integers(0, 40)))
        demand = draw(st.one_of(st.none(), st.integers(0, 60)))
        in_use = draw(st.integers(0, 30))
        pending = draw(st.sampled_from([0, 0, 0, 2, 8]))
        demands.append(QueueDemand(
            name, f"t{i % 3}", "f", "nvidia.com/gpu", current, demand, demand_p95=float(demand or 0),
            in_use=float(in_use), pending_now=float(pending), pending_share=draw(st.sampled_from([0.0, 0.0, 0.3])),
            evidence_days=draw(st.sampled_from([1.0, 14.0, 30.0])),
        ))
        queue_policies[name] = QueuePolicy(weight=draw(weights), guarantee=draw(st.sampled_from([0, 0, 4, 16])))
        caps[name] = draw(st.one_of(st.none(), st.integers(0, 50)))
    reserve = draw(st.sampled_from(["n+1", 0, 3, "10%"]))
    policy = PlanPolicy(queues=queue_policies, reserve=ReservePolicy(default=reserve),
                        max_step=draw(st.sampled_from([0.1, 0.25, 1.0])))
    pool = PoolCapacity("f", "nvidia.com/gpu", draw(st.integers(0, 300)), draw(st.integers(0, 16)), nodes=4,
                        largest_node=8)
    return pool, demands, policy, caps


@settings(max_examples=300)
@given(pools())
def test_a_plan_without_conflict_keeps_every_constraint(case: tuple) -> None:
    pool, demands, policy, caps = case
    plan = solve_pool(pool, demands, policy, caps)
    if plan.conflict is not None:
        assert all(q.binding == "conflict" and q.planned == (q.demand.current or 0) for q in plan.queues)
        return
    assert plan.available == pool.capacity - plan.reserve
    assert sum(q.planned for q in plan.queues) <= plan.available
    assert sum(q.target for q in plan.queues) <= plan.available
    for q in plan.queues:
        d, g = q.demand, policy.queue(q.demand.queue).guarantee
        assert q.planned >= min(g, math.ceil(d.in_use + d.pending_now))  # guarantee floor
        assert q.target >= min(g, math.ceil(d.in_use + d.pending_now))
        if d.current is not None and d.pending_work:
            assert q.planned >= d.current and q.target >= d.current  # no cut while work is pending
        if d.current is not None and d.evidence_days < policy.min_evidence_days_to_cut - 1:
            assert q.planned >= d.current  # no cut on too little evidence
        if d.current is not None:
            step = max(policy.min_step_units, math.floor(d.current * policy.max_step + 1e-9))
            assert q.planned >= d.current - step
            assert q.planned <= max(d.current + step, q.lower)  # only a guarantee may jump further
        cap = caps[d.queue]
        if cap is not None:
            assert q.planned <= max(cap, q.lower)


@settings(max_examples=200)
@given(pools(), st.integers(1, 64))
def test_more_capacity_never_lowers_any_queues_plan(case: tuple, more: int) -> None:
    pool, demands, policy, caps = case
    before = solve_pool(pool, demands, policy, caps)
    bigger = PoolCapacity(pool.flavor, pool.resource, pool.physical + more, pool.drained, nodes=pool.nodes,
                          largest_node=pool.largest_node)
    after = solve_pool(bigger, demands, policy, caps)
    if before.conflict is not None:
        return
    assert after.conflict is None
    for b, a in zip(before.queues, after.queues, strict=True):
        assert a.planned >= b.planned and a.target >= b.target, (b, a)


@settings(max_examples=100)
@given(pools(), st.randoms(use_true_random=False))
def test_the_plan_is_deterministic_whatever_the_order_of_the_queues(case: tuple, rnd: random.Random) -> None:
    pool, demands, policy, caps = case
    first = solve_pool(pool, demands, policy, caps)
    shuffled = list(demands)
    rnd.shuffle(shuffled)
    assert solve_pool(pool, shuffled, policy, caps) == first
