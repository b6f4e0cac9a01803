"""One quota plan for the whole fleet: read the store, decide every flavor and resource, record the result."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb

from analytics.facts import bind_facts
from analytics.plan.inputs import (
    add_capacity,
    apply_capacity_file,
    inventory_capacity,
    latest_time,
    queue_demands,
)
from analytics.plan.kai_pools import (
    SYSTEM_KINDS,
    is_system_pool,
    plan_queue_systems,
    pool_of,
    price_pools,
    system_capacity,
)
from analytics.plan.model import FleetPlan, PoolCapacity, PoolPlan, QueueDemand
from analytics.plan.policy import CapacityFile, PlanPolicy
from analytics.plan.record import store_plan
from analytics.plan.solve import budget_caps, solve_pool
from analytics.quota import QuotaSettings
from collector.queue_systems import CLUSTER_QUEUE
from collector.store_errors import connect_store, reading_store
from gpulens.core.errors import UserError


class PlanConflict(UserError):
    """The constraints of some pool conflict: it kept its quotas, the others were planned (exit status 3)."""

    exit_code = 3


def plan_pools(
    pools: Mapping[tuple[str, str], PoolCapacity], demands: Sequence[QueueDemand], policy: PlanPolicy,
    budgets: tuple[Mapping[tuple[str, str, str], int | None], Sequence[str]] | None = None,
) -> tuple[tuple[PoolPlan, ...], tuple[QueueDemand, ...], tuple[str, ...]]:
    """Decide every pool that has queues; entries whose flavor and resource have no known capacity stay unplanned.
    ``budgets``: the budget caps and notes, where they were split over more queues than ``demands``."""
    caps, notes = budgets or budget_caps([d for d in demands if (d.flavor, d.resource) in pools], pools, policy)
    per_pool: dict[tuple[str, str], list[QueueDemand]] = defaultdict(list)
    unplanned = []
    for d in demands:
        if (d.flavor, d.resource) in pools:
            per_pool[(d.flavor, d.resource)].append(d)
        else:
            unplanned.append(d)
    plans = []
    for key in sorted(per_pool):
        mine = per_pool[key]
        pool_caps = {d.queue: caps.get((d.queue, d.flavor, d.resource)) for d in mine}
        plans.append(solve_pool(pools[key], mine, policy, pool_caps))
    unplanned.sort(key=lambda d: (d.flavor, d.resource, d.queue))
    return tuple(plans), tuple(unplanned), tuple(notes)


def run_id_of(start: datetime, end: datetime, policy: PlanPolicy, pools: Mapping[tuple[str, str], PoolCapacity],
              demands: Iterable[object] = ()) -> str:
    """The plan's id: the same window, policy, capacity and evidence (every queue's demand) give the same id;
    a plan over other evidence, late samples say, gets its own, so its record never replaces the earlier one."""
    blob = json.dumps([start.isoformat(), end.isoformat(), policy.model_dump(mode="json"),
                       sorted((k, repr(v)) for k, v in pools.items()), sorted(repr(d) for d in demands)],
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _naive_utc(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def make_plan(
    con: duckdb.DuckDBPyConnection,
    policy: PlanPolicy,
    *,
    capacity: CapacityFile | None = None,
    extra: Mapping[tuple[str, str], int] | None = None,
    window_end: datetime | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> FleetPlan:
    """Read the store through ``con`` (facts through the ``f_*`` views) and decide the plan (nothing is written)."""
    bind_facts(con, None, temporary=True)
    generated_at = _naive_utc(clock())
    end = window_end or latest_time(con)
    if end is None:
        raise UserError("the store holds no samples and no quota snapshots yet: nothing to plan")
    end = _naive_utc(end)
    start = end - timedelta(days=policy.window_days)
    settings = QuotaSettings(max_step=policy.max_step, min_step_units=policy.min_step_units,
                             min_cut_days=policy.min_evidence_days_to_cut)  # one cut rule: recommend's
    everything = queue_demands(con, start, end, settings, (CLUSTER_QUEUE, *SYSTEM_KINDS), pool_of)
    if not everything:
        raise UserError("the store holds no Kueue ClusterQueue, KAI or Volcano queue quotas in the window: "
                        "nothing to plan")
    demands = [d for d in everything if d.kind == CLUSTER_QUEUE]
    systems = [d for d in everything if d.kind != CLUSTER_QUEUE]
    flavors = {d.flavor for d in demands}
    fleet = inventory_capacity(con, flavors, start, policy.hours_per_month)
    pools, notes = dict(fleet.pools), list(fleet.notes)
    cluster, cluster_notes = system_capacity(con, systems, start, policy.hours_per_month, kueue=bool(demands))
    notes += cluster_notes
    if capacity is not None:
        pools = apply_capacity_file(pools, capacity)
        cluster = {k: v for k, v in apply_capacity_file(cluster, capacity).items() if is_system_pool(k[0])}
        pools = {k: v for k, v in pools.items() if not is_system_pool(k[0])}
    if extra:
        known = flavors | {d.flavor for d in systems}
        for flavor, resource in extra:
            if (flavor, resource) not in pools and (flavor, resource) not in cluster and flavor not in known:
                raise UserError(f"invalid --add-capacity: no queue uses flavor {flavor!r}")
        pools = add_capacity(pools, {k: n for k, n in extra.items() if not is_system_pool(k[0])})
        cluster = add_capacity(cluster, {k: n for k, n in extra.items() if is_system_pool(k[0])})
    priced = {**pools, **price_pools(systems, cluster)}
    caps = budget_caps([d for d in everything if (d.flavor, d.resource) in priced], priced, policy)
    plans, unplanned, budget_notes = plan_pools(pools, demands, policy, caps)
    for d in unplanned:
        why = fleet.lacks(d.flavor, d.resource) or "capacity unknown: no devices on the flavor's nodes"
        notes.append(f"{d.queue} {d.flavor}/{d.resource}: {why} and it is not in --capacity: not planned")
    system = plan_queue_systems(systems, cluster, policy, caps[0])
    return FleetPlan(run_id_of(start, end, policy, {**pools, **cluster}, everything), generated_at, start, end, policy,
                     plans + system.pools, unplanned + system.unplanned, tuple(notes) + budget_notes + system.notes)


def plan_store(
    db_path: str | Path,
    policy: PlanPolicy,
    *,
    capacity: CapacityFile | None = None,
    extra: Mapping[tuple[str, str], int] | None = None,
    store: bool = True,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> FleetPlan:
    """Plan over the store at ``db_path``; with ``store`` the plan replaces its run's rows in ``quota_plan``."""

    path = Path(db_path)
    with connect_store(path, read_only=not store) as con, reading_store(path):
        plan = make_plan(con, policy, capacity=capacity, extra=extra, clock=clock)
        if store:
            store_plan(con, plan)
    return plan
