"""A tenant's view of the fleet's MIG layout plan: its rows of the plan, never a plan made again on its data.

The plan is decided once over the whole fleet (who holds which GPU, which GPUs are healthy). A tenant
sees the changes that serve one of its workloads or repartition a GPU it holds, its reused instances and
what of its own does not fit, with the fleet's numbers. A change that also touches another tenant's
workload is marked :data:`SHARED_DEVICE` and names that workload only as ``other``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from analytics.miglayout.fleet import GpuState
from analytics.miglayout.planner import LayoutPlan
from analytics.miglayout.run import LayoutRun

SHARED_DEVICE = "shared device, decided fleet-wide"
"""What a tenant reads beside a change that also serves or frees another tenant's workload."""


def tenant_view(run: LayoutRun, tenants: Iterable[str], other: str) -> LayoutRun:
    """The part of the fleet plan ``run`` that concerns ``tenants``; other tenants' workloads read as ``other``."""
    own_tenants = frozenset(tenants)
    p = run.plan
    own = frozenset(d.workload for d in p.demands if d.tenant in own_tenants)

    def shown(workload: str) -> str:
        return workload if workload in own else other

    def gpu(g: GpuState) -> GpuState:
        return dataclasses.replace(g, holders=frozenset(shown(h) for h in g.holders))

    changes = []
    for c in p.changes:
        touched = {w for w, _ in c.serves} | c.gpu.holders
        if not touched & own:
            continue
        changes.append(dataclasses.replace(
            c, gpu=gpu(c.gpu), serves=tuple((shown(w), pr) for w, pr in c.serves),
            shared=c.shared or not touched <= own,
        ))
    changed = {c.gpu.gpu_uuid for c in changes}
    plan = LayoutPlan(
        gpus=tuple(gpu(g) for g in p.gpus if g.holders & own or g.gpu_uuid in changed),
        demands=tuple(d for d in p.demands if d.workload in own),
        changes=tuple(changes),
        reused=tuple(r for r in p.reused if r.workload in own),
        unplaced=tuple(u for u in p.unplaced if u.workload in own),
    )
    return dataclasses.replace(run, plan=plan)

