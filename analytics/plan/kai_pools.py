"""Pools of KAI Scheduler and Volcano queues for ``gpulens plan``: one per KAI parent queue, the cluster's GPUs on top.

KAI queues have no flavor and form a tree (``spec.parentQueue``). The top-level queues share the cluster's
GPUs (every node of the store, drain and warn lists out; ``--capacity`` pool ``kai`` overrides), less the
reserve. The children of a queue share that queue's quota: the smaller of its current and its planned
quota, so they fit whether or not the parent's change lands; no reserve is kept again (the top level
keeps it) unless the policy names the pool. Pools are decided top-down with the rules of a Kueue
flavor (:func:`analytics.plan.solve.solve_pool`); a child that asks more than its parent's quota
leaves gets what fits, and the rest is refused with that reason. Volcano queues share the cluster's
devices per resource (pool ``volcano``); they are planned and shown, never written (no Volcano writer).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import duckdb

from analytics.plan.inputs import cluster_capacity
from analytics.plan.model import PoolCapacity, PoolPlan, QueueDemand, QueuePlan
from analytics.plan.policy import PlanPolicy
from analytics.plan.solve import solve_pool
from analytics.quota import QuotaEvidence
from analytics.writers.kai import ENTRY, KaiQueueTarget
from analytics.writers.live_totals import LiveTotal, read_live_totals
from collector.queue_systems import CLUSTER_QUEUE, KAI_QUEUE, VOLCANO_QUEUE
from gpulens.core.kube_api import KubernetesClient

KAI_TOP = "kai"
"""The pool of the top-level KAI queues (and its name in ``--capacity``, the reserve and guarantees)."""
VOLCANO_POOL = "volcano"
SYSTEM_KINDS = (KAI_QUEUE, VOLCANO_QUEUE)
KAI_NOTE = ("KAI queues: the top-level queues (pool kai) share every node's devices less the reserve; the children "
            "of a queue (pool kai:<queue>) share its quota, the smaller of its current and planned, with no reserve "
            "of their own; a child's raise beyond its parent's quota is refused")
UNWRITTEN_NOTE = ("Volcano queues are planned and shown, never written: gpulens has no Volcano writer "
                  "(their quotas come from Volcano's metrics)")


def kai_pool(parent: str | None) -> str:
    """The pool of a KAI queue under ``parent`` (``kai:<parent>``), or the top-level pool."""
    return f"{KAI_TOP}:{parent}" if parent else KAI_TOP


def pool_of(ev: QuotaEvidence) -> str:
    """The pool of one queue entry: a ClusterQueue's flavor, ``volcano``, or the KAI pool of its parent."""
    if ev.key.object_kind == CLUSTER_QUEUE:
        return ev.key.flavor
    if ev.key.object_kind == VOLCANO_QUEUE:
        return VOLCANO_POOL
    return kai_pool(ev.annotations.get("parentQueue") or None)


def is_system_pool(name: str) -> bool:
    return name in (KAI_TOP, VOLCANO_POOL) or name.startswith(f"{KAI_TOP}:")


def price_pools(
    demands: Sequence[QueueDemand], cluster: Mapping[tuple[str, str], PoolCapacity]
) -> dict[tuple[str, str], PoolCapacity]:
    """The pools of ``demands`` with a unit price for budgets: a KAI child pool is priced as the top level."""
    out = {}
    for d in demands:
        key = (d.flavor, d.resource)
        top = (cluster.get(key) or cluster.get((KAI_TOP, d.resource))) if d.kind == KAI_QUEUE else cluster.get(key)
        if top is not None:
            out[key] = top
    return out


def system_capacity(
    con: duckdb.DuckDBPyConnection, demands: Sequence[QueueDemand], window_start: datetime, hours_per_month: float,
    *, kueue: bool,
) -> tuple[dict[tuple[str, str], PoolCapacity], list[str]]:
    """The cluster's devices as the ``kai`` and ``volcano`` pools (those the demands use), and notes; with
    ``kueue`` (Kueue queues planned too) a note that both count the same nodes."""
    cluster: dict[tuple[str, str], PoolCapacity] = {}
    notes: list[str] = []
    names = sorted({KAI_TOP if d.kind == KAI_QUEUE else VOLCANO_POOL for d in demands})
    for name in names:
        pools, left_out = cluster_capacity(con, name, window_start, hours_per_month)
        cluster.update(pools)
        notes += left_out
        if kueue:
            notes.append(f"pool {name} counts every node's devices, as the Kueue flavors do: where both schedulers "
                         f"share nodes, give pool {name} its share with --capacity")
    return cluster, notes


@dataclass(frozen=True)
class SystemPlan:
    """The decided KAI and Volcano pools, the entries left unplanned, and what the plan says about them."""

    pools: tuple[PoolPlan, ...]
    unplanned: tuple[QueueDemand, ...]
    notes: tuple[str, ...]


def plan_queue_systems(
    demands: Sequence[QueueDemand],
    cluster: Mapping[tuple[str, str], PoolCapacity],
    policy: PlanPolicy,
    budget_caps: Mapping[tuple[str, str, str], int | None],
) -> SystemPlan:
    """Decide the KAI tree top-down and the Volcano pools; ``cluster`` holds the capacity of the pools that
    share the whole cluster (``kai`` and ``volcano``, per resource)."""
    per_pool: dict[tuple[str, str], list[QueueDemand]] = defaultdict(list)
    for d in demands:
        per_pool[(d.flavor, d.resource)].append(d)
    plans: list[PoolPlan] = []
    notes: list[str] = []
    unplanned: list[QueueDemand] = []
    frontier: list[tuple[tuple[str, str], PoolCapacity, PlanPolicy, QueuePlan | None]] = []
    """Pools to decide: key, capacity, policy, and the parent queue's plan (None: top level or unlimited)."""
    for key in sorted(k for k in per_pool if k[0] in (KAI_TOP, VOLCANO_POOL)):
        cap = cluster.get(key)
        if cap is not None:
            frontier.append((key, cap, policy, None))
    done = {key for key, *_ in frontier}
    while frontier:
        key, cap, pool_policy, parent = frontier.pop(0)
        unbounded = [d for d in per_pool[key] if d.kind == KAI_QUEUE and d.current is None]
        mine = [d for d in per_pool[key] if not (d.kind == KAI_QUEUE and d.current is None)]
        plan = solve_pool(cap, mine, pool_policy,
                          {d.queue: budget_caps.get((d.queue, d.flavor, d.resource)) for d in mine})
        if parent is not None:
            plan = _refuse_beyond_parent(plan, parent)
        if plan.queues:
            plans.append(plan)
        unplanned += unbounded
        notes += [f"{d.queue} {d.flavor}/{d.resource}: its KAI quota is -1 (unlimited), and gpulens never sets a "
                  f"finite quota on it: not planned" for d in unbounded]
        if not key[0].startswith(KAI_TOP):
            continue
        top = cluster.get((KAI_TOP, key[1]), cap)
        parents = [(q.demand.queue, q.demand.current, q.planned, q) for q in plan.queues]
        for name, current, planned, q in parents + [(d.queue, None, None, None) for d in unbounded]:
            child = (kai_pool(name), key[1])
            if child in per_pool and child not in done:
                done.add(child)
                frontier.append((child, _parent_capacity(name, current, planned, plan, top),
                                 _no_reserve_unless_named(policy, child[0]), q))
    for key in sorted(set(per_pool) - done):
        unplanned += per_pool[key]
        notes += [f"{d.queue} {d.flavor}/{d.resource}: {_why_unplanned(key)}: not planned" for d in per_pool[key]]
    if any(d.kind == KAI_QUEUE for d in demands):
        notes.append(KAI_NOTE)
    if any(d.kind == VOLCANO_QUEUE for d in demands):
        notes.append(UNWRITTEN_NOTE)
    order = {KAI_TOP: 0, VOLCANO_POOL: 2}
    plans.sort(key=lambda p: (order.get(p.pool.flavor, 1), p.pool.flavor, p.pool.resource))
    return SystemPlan(tuple(plans), tuple(unplanned), tuple(notes))


def _why_unplanned(key: tuple[str, str]) -> str:
    if key[0] in (KAI_TOP, VOLCANO_POOL):
        return (f"capacity unknown: no devices in the store's inventory and pool {key[0]!r} is not in --capacity")
    parent = key[0].removeprefix(f"{KAI_TOP}:")
    return f"its parent queue {parent} is not a planned KAI queue of the store (missing, unplanned, or in a cycle)"


def _parent_capacity(name: str, current: int | None, planned: int | None, parent_pool: PoolPlan,
                     top: PoolCapacity) -> PoolCapacity:
    """What the children of KAI queue ``name`` share: the smaller of its current and planned quota; an unlimited
    queue (no finite quota) passes on what its own pool has for quotas."""
    if current is None or planned is None:
        units = parent_pool.available
        how = f"KAI queue {name} has no finite quota: what its pool {parent_pool.pool.flavor} has for quotas"
    else:
        units = min(current, planned)
        how = f"quota of KAI queue {name}: the smaller of current {current} and planned {planned}"
    return PoolCapacity(kai_pool(name), parent_pool.pool.resource, units, nodes=None, largest_node=None,
                        unit_price_month=top.unit_price_month, source=how)


def _no_reserve_unless_named(policy: PlanPolicy, pool: str) -> PlanPolicy:
    """The children of a queue keep no reserve of their own (the top level keeps it) unless the policy names the pool."""
    if pool in policy.reserve.flavors:
        return policy
    reserve = policy.reserve.model_copy(update={"flavors": {**policy.reserve.flavors, pool: 0}})
    return policy.model_copy(update={"reserve": reserve})


def _refuse_beyond_parent(plan: PoolPlan, parent: QueuePlan) -> PoolPlan:
    """Where a child asks more than its parent's quota leaves it, say so: the rest of the raise is refused."""
    name = parent.demand.queue
    queues = []
    for q in plan.queues:
        if q.binding not in ("conflict", "budget") and q.planned < q.upper and plan.planned_total >= plan.available:
            q = dataclasses.replace(q, binding="parent", explanation=(
                f"{q.demand.queue} gets {q.planned} of the {q.upper} it asks: the children of KAI queue {name} share "
                f"its quota ({plan.pool.physical}); the raise beyond it is refused (raise {name}'s quota first)"))
        queues.append(q)
    return dataclasses.replace(plan, queues=tuple(queues))


def kai_live_totals(pools: Sequence[PoolPlan], api: KubernetesClient) -> list[LiveTotal]:
    """Per KAI pool: the live quotas of its queues (read back after a partial apply), against what it may give."""
    target = KaiQueueTarget()
    out = []
    for pool in pools:
        if not pool.queues or pool.queues[0].demand.kind != KAI_QUEUE:
            continue
        (total,) = read_live_totals(api, {ENTRY: [(target, "", q.demand.queue) for q in pool.queues]},
                                    {ENTRY: pool.available})
        out.append(dataclasses.replace(total, flavor=pool.pool.flavor))
    return out
