"""Before a plan's writes: hold a KAI child's raise when its parent's live quota no longer holds its children's plan.

The children of a KAI queue were planned within the smaller of the parent's current and planned quota,
so whether or not the parent's own change lands, they fit, unless someone lowered the parent since the
evidence. Each parent of a raised child is read once, before any write; where its live quota (finite)
is below the children's planned total, the child's raise is held and its outcome says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from analytics.plan.kai_pools import KAI_TOP
from analytics.plan.model import FleetPlan
from analytics.writers.apply import ApplyOutcome
from analytics.writers.kai import ENTRY, KaiQueueTarget
from analytics.writers.order import is_cut
from analytics.writers.plan import ObjectPlan
from collector.queue_systems import KAI_QUEUE
from gpulens.core.kube_api import KubernetesApiError, KubernetesReads


def hold_raises_beyond_live_parents(
    plan: FleetPlan, objects: Sequence[ObjectPlan], api: KubernetesReads
) -> tuple[list[ObjectPlan], dict[str, str]]:
    """The objects, with each such child's raise turned into a hold, and the reason per object ref."""
    need: dict[str, int] = {}
    parent_of: dict[str, str] = {}
    for pool in plan.pools:
        if pool.pool.flavor.startswith(f"{KAI_TOP}:") and pool.conflict is None:
            name = pool.pool.flavor.removeprefix(f"{KAI_TOP}:")
            need[name] = pool.planned_total
            parent_of.update((q.demand.queue, name) for q in pool.queues)
    target = KaiQueueTarget()
    live: dict[str, float | str | None] = {}
    out: list[ObjectPlan] = []
    held: dict[str, str] = {}
    for obj in objects:
        parent = parent_of.get(obj.name) if obj.target.object_kind == KAI_QUEUE else None
        raises = [r for r in obj.changes if not is_cut(r)]
        if parent is None or not raises:
            out.append(obj)
            continue
        if parent not in live:
            live[parent] = _live_quota(api, target, parent)
        quota = live[parent]
        if isinstance(quota, str):
            why = f"raise refused: the parent KAI queue {parent} could not be read ({quota})"
        elif quota is None or quota >= need[parent]:
            out.append(obj)
            continue
        else:
            why = (f"raise refused: the children of KAI queue {parent} were planned in {need[parent]} GPU(s), but its "
                   f"live quota is {quota:g} now (lowered since the evidence): plan again")
        out.append(dataclasses.replace(obj, recommendations=tuple(
            dataclasses.replace(r, action="hold", next_value=r.current) if r in raises else r
            for r in obj.recommendations)))
        held[obj.ref] = why
    return out, held


def _live_quota(api: KubernetesReads, target: KaiQueueTarget, name: str) -> float | str | None:
    """The live GPU quota of a KAI queue; None where it sets none or is unlimited; the error in words."""
    try:
        quota = target.current_values(api.get(target.path("", name))).get(ENTRY)
    except KubernetesApiError as exc:
        return exc.message
    return None if quota is None or quota < 0 else quota


def with_held(outcomes: Sequence[ApplyOutcome], held: dict[str, str]) -> list[ApplyOutcome]:
    """Each held object's outcome as refused, with the reason."""
    return [ApplyOutcome(o.ref, "refused", held[o.ref], notes=(held[o.ref],)) if o.ref in held and o.status in
            ("unchanged", "applied") and not o.changes else o for o in outcomes]
