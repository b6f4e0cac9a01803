"""Write a fleet plan through the Kueue and KAI writers: dry-run YAML per ClusterQueue or KAI Queue, or guarded
server-side apply (cuts first, raises only where every cut of their pool landed), and read live totals back."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from analytics.plan.kai_parents import hold_raises_beyond_live_parents, with_held
from analytics.plan.kai_pools import kai_live_totals
from analytics.plan.model import FleetPlan
from analytics.quota import QuotaRecommendation
from analytics.writers.apply import ApplyOutcome, QuotaApplier
from analytics.writers.base import clear_dry_run_dir, format_quantity
from analytics.writers.kai import KaiQueueTarget
from analytics.writers.kueue import ClusterQueueTarget
from analytics.writers.live_totals import LiveTotal, QueueRef, read_live_totals
from analytics.writers.order import apply_in_order
from analytics.writers.plan import ObjectPlan, build_plans, dump_yaml
from analytics.writers.served import at_served_versions
from collector.queue_systems import CLUSTER_QUEUE, KAI_QUEUE
from gpulens.core.kube_api import KubernetesClient

DRY_RUN_HEADER = "# written by `gpulens plan`"
"""First line of every file ``write_plan_yaml`` writes; only such files are replaced by the next run."""


class PlanClusterQueueTarget(ClusterQueueTarget):
    """A ClusterQueue writer that can also set ``spec.fairSharing.weight`` to the queue's plan weight."""

    def __init__(self, version: str, *, weights: Mapping[str, float] | None = None,
                 borrowing_limit_ratio: float | None = None, lending_limit_ratio: float | None = None) -> None:
        super().__init__(version, borrowing_limit_ratio=borrowing_limit_ratio, lending_limit_ratio=lending_limit_ratio)
        self.weights = dict(weights or {})

    def owned_spec(self, obj: Mapping[str, Any], values: Mapping[tuple[str, str], int]) -> dict[str, Any]:
        spec = super().owned_spec(obj, values)
        name = obj.get("metadata", {}).get("name")
        if name in self.weights:
            spec["fairSharing"] = {"weight": format_quantity(self.weights[name])}
        return spec


def planned_recommendations(plan: FleetPlan) -> list[QuotaRecommendation]:
    """``recommend``'s results re-decided by the plan, for every entry of each ClusterQueue the plan changes.

    Changed entries carry the planned value as the next apply; every other entry of those queues (held,
    conflicting or without known capacity) is a hold, so the writers rebuild whole objects and change
    only what the plan decided.
    """
    held: list[QuotaRecommendation] = []
    changed: list[QuotaRecommendation] = []
    for pool in plan.pools:
        for q in pool.queues:
            rec = q.demand.source
            if rec is None:
                continue
            if pool.conflict is not None or q.planned == q.demand.current:
                held.append(_hold(rec))
                continue
            action = "increase" if q.demand.current is None or q.planned > q.demand.current else "decrease"
            reason = f"quota plan {plan.run_id}: {q.explanation} (binding: {q.binding})"
            changed.append(dataclasses.replace(rec, action=action, recommended=q.target, next_value=q.planned,
                                               reasons=(*rec.reasons, reason)))
    held += [_hold(d.source) for d in plan.unplanned if d.source is not None]
    queues = {r.key.object_id for r in changed}
    return sorted((r for r in changed + held if r.key.object_id in queues),
                  key=lambda r: (r.key.object_id, r.key.flavor, r.key.resource))


def _hold(rec: QuotaRecommendation) -> QuotaRecommendation:
    return dataclasses.replace(rec, action="hold", next_value=rec.current)


def object_plans(plan: FleetPlan, *, record_namespace: str = "gpulens") -> list[ObjectPlan]:
    """One writer plan per ClusterQueue the plan changes; a pool in conflict keeps its entries as they are."""
    p = plan.policy
    weights = None
    if p.fair_sharing_weight:
        weights = {q.demand.queue: q.weight for pool in plan.pools for q in pool.queues}
    target = PlanClusterQueueTarget(p.kueue_version, weights=weights, borrowing_limit_ratio=p.borrowing_limit_ratio,
                                    lending_limit_ratio=p.lending_limit_ratio)
    targets = {target.object_kind: target, KAI_QUEUE: KaiQueueTarget()}  # Volcano queues: no writer
    return build_plans(planned_recommendations(plan), [], targets,
                       record_namespace=record_namespace, run_id=plan.run_id)


def _file_name(obj: ObjectPlan) -> str:
    kind = "clusterqueue" if obj.target.object_kind == CLUSTER_QUEUE else obj.target.object_kind.lower()
    return f"{kind}-" + re.sub(r"[^a-z0-9.-]+", "-", obj.name.lower()) + ".yaml"


def write_plan_yaml(plan: FleetPlan, objects: list[ObjectPlan], out_dir: str | Path) -> list[Path]:
    """Write the apply body of every changed ClusterQueue and, next to it (``.rollback.yaml``), the body that
    puts its quotas back to today's values; files an earlier plan wrote there are removed first."""
    out = clear_dry_run_dir(out_dir, DRY_RUN_HEADER)
    header = (f"{DRY_RUN_HEADER} (run {plan.run_id}, {plan.generated_at:%Y-%m-%dT%H:%M:%SZ}, evidence "
              f"{plan.window_start:%Y-%m-%dT%H:%MZ} .. {plan.window_end:%Y-%m-%dT%H:%MZ})\n")
    written = []
    for obj in objects:
        if obj.writable:
            path = out / _file_name(obj)
            path.write_text(header + obj.target.dry_run_note + dump_yaml(obj.body(plan.generated_at)),
                            encoding="utf-8")
            today = [dataclasses.replace(r, next_value=r.current) for r in obj.applicable if r.current is not None]
            back = path.with_suffix(".rollback.yaml")
            back.write_text(header + "# ROLLBACK: the quotas this plan changes, at today's values; apply it the same "
                            "way to undo the plan\n" + dump_yaml(obj.body(plan.generated_at, recommendations=today)),
                            encoding="utf-8")
            written += [path, back]
    return written


def apply_plan(
    objects: list[ObjectPlan], api: KubernetesClient, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] | None = None, say: Callable[[str], None] = lambda line: None,
    plan: FleetPlan | None = None,
) -> list[ApplyOutcome]:
    """Server-side apply of every object with ``recommend``'s guard rails, at the Kueue version the cluster
    serves (``say`` hears which), cuts first; one outcome per object. With ``plan``, a KAI child's raise is
    held where its parent's live quota no longer holds its children's plan."""
    kwargs: dict[str, Any] = {"clock": clock}
    if sleep is not None:
        kwargs["sleep"] = sleep
    held: dict[str, str] = {}
    if plan is not None:
        objects, held = hold_raises_beyond_live_parents(plan, objects, api)
    served, lines = at_served_versions(api, objects)
    for line in lines:
        say(line)
    return with_held(apply_in_order(QuotaApplier(api, **kwargs), served), held)


def live_totals(plan: FleetPlan, api: KubernetesClient) -> list[LiveTotal]:
    """Every planned flavor and resource: the live nominal quotas of all its queues, against what the plan may give."""
    target, _ = ClusterQueueTarget(plan.policy.kueue_version).served(api)
    members: dict[tuple[str, str], list[QueueRef]] = {}
    capacity = {}
    for pool in plan.pools:
        key = (pool.pool.flavor, pool.pool.resource)
        if pool.queues and pool.queues[0].demand.kind != CLUSTER_QUEUE:
            continue
        members[key] = [(target, "", q.demand.queue) for q in pool.queues]
        capacity[key] = pool.available
    return read_live_totals(api, members, capacity) + kai_live_totals(plan.pools, api)
