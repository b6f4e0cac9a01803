"""Decide every queue of a flavor and resource together: bounds per queue, water-filling, binding constraints.

Per queue the bounds are: floor = max(min(guarantee, in use + pending), current when it has pending work
or too little evidence to cut); ceiling = min(recommend's demand, budget share). The target fills the
capacity left after drains and the reserve by weighted max-min fairness within those bounds; the
planned value (the next apply) does the same within one step of the current value. Floors that do
not fit are a conflict: reported with the amounts; that flavor and resource keeps its quotas as they are,
and the other pools are planned as usual.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from analytics.cut_rule import cut_refusal
from analytics.plan.model import Conflict, PoolCapacity, PoolPlan, QueueDemand, QueuePlan
from analytics.plan.policy import PlanPolicy
from analytics.plan.waterfill import Claim, water_fill

EPS = 1e-9
"""Evidence this close to the required days counts as enough (a window's first bucket may start late)."""


@dataclass(frozen=True)
class _Bounds:
    lo: int
    lo_by: str
    hi: int
    hi_by: str
    guarantee: int
    refusal: str | None = None
    """Why the cut rule refuses a cut (``analytics/cut_rule.py``); None: a cut may stand on the evidence."""


def reserve_for(pool: PoolCapacity, policy: PlanPolicy) -> tuple[int, str]:
    """Units kept out of nominal quotas, and the rule in words."""
    rule = policy.reserve.rule_for(pool.flavor)
    cap = pool.capacity
    if isinstance(rule, int) or str(rule).isdigit():
        units = int(rule)
        return min(units, cap), f"{units} unit(s)"
    text = str(rule)
    if text.endswith("%"):
        share = float(text[:-1]) / 100
        return min(cap, math.ceil(cap * share - EPS)), f"{text} of capacity"
    if pool.largest_node is None:
        return 0, "n+1 unknown (no node inventory for this flavor): 0 kept; set reserve in the policy"
    if pool.nodes is not None and pool.nodes <= 1:
        return 0, "n+1 impossible on a single node: 0 kept"
    if pool.dedicated_tenant is not None and pool.flavor not in policy.reserve.flavors:
        return 0, (f"every node dedicated to {pool.dedicated_tenant}, the only tenant a lost node hurts: 0 kept; "
                   f"reserve: {{flavors: {{{pool.flavor}: n+1}}}} keeps n+1")
    return min(cap, pool.largest_node), f"n+1 (largest node: {pool.largest_node})"


def _ceil(x: float) -> int:
    return max(0, math.ceil(x - EPS))


def _bounds(d: QueueDemand, policy: PlanPolicy, budget_cap: int | None, *, step: bool) -> _Bounds:
    current = d.current or 0
    guarantee = policy.queue(d.queue).guarantee_for(d.flavor, d.resource)
    lo, lo_by = min(guarantee, _ceil(d.in_use + d.pending_now)), "guarantee"
    refusal = cut_refusal(d.evidence_days, policy.min_evidence_days_to_cut, d.evidence_step_seconds)
    if d.demand is None:
        hold, why = current, "evidence"
    elif d.pending_work:
        hold, why = current, "pending"
    elif refusal is not None:
        hold, why = current, "evidence"
    else:
        hold, why = 0, ""
    if hold > lo:
        lo, lo_by = hold, why
    ask = current if d.demand is None else d.demand
    hi, hi_by = ask, "demand"
    if budget_cap is not None and budget_cap < hi:
        hi, hi_by = budget_cap, "budget"
    if step and d.current is not None:
        allowed = max(policy.min_step_units, math.floor(d.current * policy.max_step + EPS))
        if d.current - allowed > lo:
            lo, lo_by = d.current - allowed, "step"
        if d.current + allowed < hi:
            hi, hi_by = d.current + allowed, "step"
    return _Bounds(lo, lo_by, hi, hi_by, guarantee, refusal)


def _claims(demands: Sequence[QueueDemand], bounds: Sequence[_Bounds], policy: PlanPolicy) -> list[Claim]:
    return [
        Claim(d.queue, b.lo, max(b.lo, b.hi), policy.queue(d.queue).weight)
        for d, b in zip(demands, bounds, strict=True)
    ]


def _conflict(pool: PoolCapacity, reserve: int, available: int, demands: Sequence[QueueDemand],
              bounds: Sequence[_Bounds], what: str) -> Conflict | None:
    lines = []
    for d, b in zip(demands, bounds, strict=True):
        if b.hi < b.lo and b.hi_by == "budget":
            lines.append(f"{d.queue}: budget allows {b.hi} but its {_floor_name(b.lo_by)} needs {b.lo} "
                         f"(short {b.lo - b.hi})")
    floors = sum(b.lo for b in bounds)
    if floors > available:
        by: dict[str, int] = defaultdict(int)
        for b in bounds:
            by[b.lo_by] += b.lo
        parts = ", ".join(f"{_floor_name(k)} {v}" for k, v in sorted(by.items()) if v)
        lines.append(
            f"{what}: floors add up to {floors} ({parts}) but capacity {pool.capacity}"
            f"{f' (after {pool.drained} on drain candidates)' if pool.drained else ''} - reserve {reserve} = "
            f"{available}: short {floors - available}"
        )
        if floors <= pool.capacity:
            lines.append(f"with a reserve of {max(0, pool.capacity - floors)} (not {reserve}) the floors would fit")
        if pool.drained and floors <= pool.physical - reserve:
            lines.append(f"without the {pool.drained} unit(s) on drain candidates out, the floors would fit")
    if not lines:
        return None
    return Conflict(pool.flavor, pool.resource, max(0, floors - available), tuple(lines))


def _floor_name(by: str) -> str:
    return {"guarantee": "guarantees", "pending": "no cut while work is pending",
            "evidence": "no cut without enough evidence", "step": "cuts limited to one step"}.get(by, by)


def solve_pool(
    pool: PoolCapacity,
    demands: Sequence[QueueDemand],
    policy: PlanPolicy,
    budget_caps: Mapping[str, int | None] | None = None,
) -> PoolPlan:
    """The plan of one flavor and resource; ``demands`` are its queues, ``budget_caps`` per queue name."""
    caps = budget_caps or {}
    demands = sorted(demands, key=lambda d: d.queue)
    reserve, rule = reserve_for(pool, policy)
    available = pool.capacity - reserve
    target_b = [_bounds(d, policy, caps.get(d.queue), step=False) for d in demands]
    planned_b = [_bounds(d, policy, caps.get(d.queue), step=True) for d in demands]
    conflict = _conflict(pool, reserve, available, demands, target_b, "guarantees and holds") or _conflict(
        pool, reserve, available, demands, planned_b, "one step per apply"
    )
    if conflict is not None:
        held = tuple(
            QueuePlan(d, policy.queue(d.queue).weight, d.current or 0, d.current or 0, b.lo, b.hi, "conflict",
                      f"{d.queue} keeps {d.current or 0}: {conflict.lines[0]}")
            for d, b in zip(demands, target_b, strict=True)
        )
        return PoolPlan(pool, reserve, rule, available, held, conflict)
    claims_t = _claims(demands, target_b, policy)
    claims_p = _claims(demands, planned_b, policy)
    target = water_fill(claims_t, available)
    planned = water_fill(claims_p, available)
    no_reserve = water_fill(claims_p, pool.capacity) if reserve else planned
    no_budget = planned
    if any(b.hi_by == "budget" for b in planned_b):
        free = [_bounds(d, policy, None, step=True) for d in demands]
        no_budget = water_fill(_claims(demands, free, policy), available)
    asked = sum(c.hi for c in claims_p)
    short = max(0, asked - available)
    out = []
    for i, (d, b) in enumerate(zip(demands, planned_b, strict=True)):
        p = planned[i]
        binding, text, gain = _explain(d, b, p, target[i], no_reserve[i] - p, no_budget[i] - p, reserve, short)
        out.append(QueuePlan(d, claims_p[i].weight, p, target[i], b.lo, max(b.lo, b.hi), binding, text, gain))
    return PoolPlan(pool, reserve, rule, available, tuple(out))


def _explain(d: QueueDemand, b: _Bounds, p: int, target: int, reserve_gain: int, budget_gain: int, reserve: int,
             short: int) -> tuple[str, str, int]:
    """Binding constraint of the planned value, a sentence, and what relaxing it gives."""
    q = d.queue
    if b.lo > b.hi or (b.lo == b.hi == p and b.lo_by == "evidence"):  # recommend's cut, refused by the cut rule
        return _floor_explain(d, b, p)
    if p >= b.hi:
        if b.hi_by == "demand":
            what = "what recommend asks" if d.demand is not None else "its current quota (no evidence to change)"
            return "demand", f"{q} gets {p}, {what}", 0
        if b.hi_by == "budget":
            return "budget", f"budget caps {q} at {p}; without the budget it gets +{budget_gain}", budget_gain
        return "step", f"{q} moves one step to {p}; later applies continue to {target}", target - p
    if p == b.lo and b.lo_by in ("step", "guarantee", "pending", "evidence") and b.lo > 0:
        return _floor_explain(d, b, p)
    if reserve and reserve_gain > 0:
        return "reserve", f"with a reserve of 0, {q} gets +{reserve_gain}", reserve_gain
    return "capacity", (f"capacity is shared out: {q} gets {p} of the {b.hi} it asks; the flavor is short "
                        f"{short} unit(s) for every ask"), b.hi - p


def _floor_explain(d: QueueDemand, b: _Bounds, p: int) -> tuple[str, str, int]:
    q = d.queue
    if b.lo_by == "guarantee":
        return "guarantee", f"{q} is held at its guarantee floor {p} (guarantee {b.guarantee})", 0
    if b.lo_by == "pending":
        return "pending", f"{q} keeps {p}: work is pending, no cut", 0
    if b.lo_by == "evidence":
        why = b.refusal if d.demand is not None and b.refusal is not None else "not enough data, a cut needs more"
        return "evidence", f"{q} keeps {p}: {why}", 0
    return "step", f"{q} is cut one step to {p}", 0


def budget_caps(
    demands: Sequence[QueueDemand], pools: Mapping[tuple[str, str], PoolCapacity], policy: PlanPolicy
) -> tuple[dict[tuple[str, str, str], int | None], list[str]]:
    """Per (queue, flavor, resource): the units a tenant's monthly budget allows, split by priced demand."""
    caps: dict[tuple[str, str, str], int | None] = {}
    notes = []
    per_tenant: dict[str, list[QueueDemand]] = defaultdict(list)
    for d in demands:
        per_tenant[d.tenant].append(d)
    for tenant, rows in sorted(per_tenant.items()):
        terms = policy.tenants.get(tenant)
        if terms is None or terms.monthly_budget_usd is None:
            continue
        priced = []
        for d in sorted(rows, key=lambda r: (r.queue, r.flavor, r.resource)):
            pool = pools.get((d.flavor, d.resource))
            price = pool.unit_price_month if pool else None
            if not price:
                notes.append(f"budget of {tenant} not enforced on {d.flavor}/{d.resource}: no price known")
                continue
            priced.append((d, price, max(d.demand if d.demand is not None else (d.current or 0), 1) * price))
        total = sum(c for _, _, c in priced)
        for d, price, cost in priced:
            share = terms.monthly_budget_usd * cost / total if total else 0.0
            caps[(d.queue, d.flavor, d.resource)] = math.floor(share / price + EPS)
    return caps, notes
