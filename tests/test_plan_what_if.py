"""What if a pool had more capacity: the plan's what-if says which queues gain and which stop waiting.

A queue stops waiting when it has work pending now and the added capacity raises its target from below to at
least what it holds plus what waits; a queue that gains without pending work only gains.
"""

from __future__ import annotations

from datetime import datetime

from analytics.plan.model import FleetPlan, PoolCapacity, QueueDemand
from analytics.plan.policy import PlanPolicy
from analytics.plan.render import render_what_if
from analytics.plan.solve import solve_pool

GPU = "nvidia.com/gpu"
T = datetime(2026, 12, 1)
DEMANDS = [  # a pool short for both: 12 held + 4 waiting, and 16 asked without waiting
    QueueDemand("notebooks", "ml", "mig", GPU, 12, 19, in_use=12, pending_now=4, pending_share=1.0, evidence_days=14),
    QueueDemand("ranking", "search", "mig", GPU, 16, 16, in_use=14, evidence_days=14),
]


def plan(units: int) -> FleetPlan:
    policy = PlanPolicy()
    return FleetPlan("run", T, T, T, policy, (solve_pool(PoolCapacity("mig", GPU, units), DEMANDS, policy),))


def test_a_queue_with_pending_work_that_the_added_capacity_holds_stops_waiting() -> None:
    base, more = plan(28), plan(36)
    text = render_what_if(base, more, {("mig", GPU): 8})
    lines = {ln.split()[0]: ln for ln in text.splitlines()[1:]}
    assert text.splitlines()[0] == "what if: mig/nvidia.com/gpu +8 (dry run, nothing written or stored)"
    assert lines["notebooks"].endswith("STOPS WAITING"), text
    assert "ranking" not in lines or "STOPS WAITING" not in lines["ranking"], text


def test_capacity_short_of_what_waits_raises_the_target_but_nobody_stops_waiting() -> None:
    text = render_what_if(plan(28), plan(30), {("mig", GPU): 2})  # notebooks 14 -> 15, short of its 12 + 4
    assert "notebooks mig/nvidia.com/gpu: target 14 -> 15 (+1)" in text and "STOPS WAITING" not in text, text


def test_a_target_that_reaches_exactly_what_is_held_and_waits_stops_waiting() -> None:
    text = render_what_if(plan(30), plan(32), {("mig", GPU): 2})  # notebooks 15 -> 16 = 12 held + 4 waiting
    assert "notebooks mig/nvidia.com/gpu: target 15 -> 16 (+1), next apply 15 -> 15  STOPS WAITING" in text, text
    assert "ranking mig/nvidia.com/gpu: target 15 -> 16 (+1), next apply 15 -> 16\n" in text + "\n", text
