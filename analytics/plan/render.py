"""The plan in words: per flavor and resource, capacity line and queues; conflicts; what-if comparisons."""

from __future__ import annotations

import math

from analytics.plan.model import FleetPlan, PoolPlan


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def render_plan(plan: FleetPlan) -> str:
    p = plan.policy
    lines = [
        f"gpulens quota plan (run {plan.run_id})",
        f"evidence window {plan.window_start:%Y-%m-%d %H:%M} .. {plan.window_end:%Y-%m-%d %H:%M} UTC "
        f"({p.window_days:g} days); generated {plan.generated_at:%Y-%m-%d %H:%M} UTC",
        "method: weighted max-min fairness by water-filling (integer units, divisor method) within each "
        f"queue's floor and ceiling; step <= {p.max_step:.0%} per apply; cuts need >= "
        f"{p.min_evidence_days_to_cut:g} days of evidence (--min-cut-days, less one bucket; recommend's rule) and no "
        "pending work",
    ]
    lines += [f"note: {n}" for n in plan.notes]
    for pool in plan.pools:
        lines += [""] + _pool_lines(pool)
    if plan.conflict_line:
        lines += ["", f"CONFLICT: {plan.conflict_line}"]
    return "\n".join(lines)


def _pool_lines(pool: PoolPlan) -> list[str]:
    c = pool.pool
    drained = f" - {c.drained} on drain candidates ({', '.join(c.drained_nodes)})" if c.drained else ""
    lines = [
        f"{c.flavor} {c.resource}: {c.physical} units ({c.source}){drained} - reserve {pool.reserve} "
        f"[{pool.reserve_rule}] = {pool.available} for nominal quotas; planned {pool.planned_total}",
    ]
    if pool.conflict is not None:
        lines += [f"  CONFLICT (short {pool.conflict.shortfall}): {line}" for line in pool.conflict.lines]
    for q in pool.queues:
        d = q.demand
        lines.append(
            f"  {d.queue:<24} w{q.weight:g}  {_num(d.current)} -> {q.planned} (target {q.target}; ask "
            f"{_num(d.demand)}, P95 {d.demand_p95:g}, pending {d.pending_share:.0%} of the window)  [{q.binding}]"
        )
        lines.append(f"      - {q.explanation}")
    return lines


def render_what_if(base: FleetPlan, what_if: FleetPlan, extra: dict[tuple[str, str], int]) -> str:
    """Which queues gain, and which stop waiting, with the extra capacity (nothing is written in this mode)."""
    added = ", ".join(f"{f}/{r} +{n}" for (f, r), n in sorted(extra.items()))
    lines = [f"what if: {added} (dry run, nothing written or stored)"]
    before = {(q.demand.queue, q.demand.flavor, q.demand.resource): q for p in base.pools for q in p.queues}
    for pool in what_if.pools:
        for q in pool.queues:
            d = q.demand
            old = before.get((d.queue, d.flavor, d.resource))
            if old is None or old.target == q.target and old.planned == q.planned:
                continue
            need = math.ceil(d.in_use + d.pending_now)
            stops = d.pending_now > 0 and old.target < need <= q.target
            lines.append(
                f"  {d.queue} {d.flavor}/{d.resource}: target {old.target} -> {q.target} "
                f"({q.target - old.target:+d}), next apply {old.planned} -> {q.planned}"
                + ("  STOPS WAITING" if stops else "")
            )
    if len(lines) == 1:
        lines.append("  no queue's plan changes")
    for pool in what_if.conflicts:
        lines.append(f"  still in conflict: {pool.pool.flavor}/{pool.pool.resource}")
    return "\n".join(lines)
