"""The quota plan's inputs and results as frozen dataclasses (units of the quota resource, USD)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from analytics.plan.policy import PlanPolicy

if TYPE_CHECKING:
    from analytics.quota import QuotaRecommendation


@dataclass(frozen=True)
class QueueDemand:
    """One queue's entry for a pool and resource: quota now and demand over the evidence window.

    ``flavor`` names the pool: a ClusterQueue's ResourceFlavor, or a KAI/Volcano pool
    (:mod:`analytics.plan.kai_pools`)."""

    queue: str
    tenant: str
    flavor: str
    resource: str
    current: int | None
    demand: int | None
    """What ``recommend`` asks for this entry (P95 of in-use + pending, headroom, its floors); None: no evidence."""
    demand_p50: float = 0.0
    demand_p95: float = 0.0
    in_use: float = 0.0
    pending_now: float = 0.0
    pending_share: float = 0.0
    """Share of the window's buckets with pending demand."""
    evidence_days: float = 0.0
    """Days the evidence covers, its last bucket counted (``QuotaEvidence.days``)."""
    evidence_step_seconds: float = 0.0
    """The evidence's bucket: the cut rule tolerates one (``analytics/cut_rule.py``)."""
    borrowing_limit: float | None = None
    lending_limit: float | None = None
    source: QuotaRecommendation | None = field(default=None, compare=False, repr=False)
    """The ``recommend`` result behind this entry (its evidence and confidence feed the writers)."""
    kind: str = "ClusterQueue"
    """The quota object's stored kind (``ClusterQueue``, ``Queue.scheduling.run.ai``, ...)."""
    parent: str | None = None
    """A KAI queue's ``spec.parentQueue`` (None: a top-level queue, or not a KAI queue)."""

    @property
    def pending_work(self) -> bool:
        return self.pending_now > 0 or self.pending_share > 0


@dataclass(frozen=True)
class PoolCapacity:
    """What one ResourceFlavor offers of one resource: units on its nodes, units on drain candidates."""

    flavor: str
    resource: str
    physical: int
    drained: int = 0
    nodes: int | None = None
    largest_node: int | None = None
    """Units of the largest node that is not a drain candidate (None: unknown)."""
    unit_price_month: float | None = None
    """USD per unit per month (None: no price known)."""
    source: str = "inventory"
    drained_nodes: tuple[str, ...] = ()
    dedicated_tenant: str | None = None
    """The tenant every node of the pool is dedicated to (None: not all one tenant's, or not known)."""

    @property
    def capacity(self) -> int:
        return max(0, self.physical - self.drained)


@dataclass(frozen=True)
class QueuePlan:
    """The plan of one queue entry: what the next apply writes, where the plan goes, and why."""

    demand: QueueDemand
    weight: float
    planned: int
    target: int
    lower: int
    upper: int
    binding: str
    """capacity | reserve | budget | step | demand | guarantee | pending | evidence | parent (KAI) | conflict."""
    explanation: str
    relax_gain: int = 0
    """Units this queue would gain if its binding constraint were relaxed (where that is computed)."""

    @property
    def change(self) -> int:
        return self.planned - (self.demand.current or 0)


@dataclass(frozen=True)
class Conflict:
    """Constraints of one flavor and resource that cannot all hold: its queues keep their quotas."""

    flavor: str
    resource: str
    shortfall: int
    lines: tuple[str, ...]


@dataclass(frozen=True)
class PoolPlan:
    """All queues of one flavor and resource, decided together."""

    pool: PoolCapacity
    reserve: int
    reserve_rule: str
    available: int
    """Capacity left for nominal quotas after drains and the reserve."""
    queues: tuple[QueuePlan, ...]
    conflict: Conflict | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def planned_total(self) -> int:
        return sum(q.planned for q in self.queues)


@dataclass(frozen=True)
class FleetPlan:
    """Every pool's plan, the queue entries that could not be planned, and the run they belong to."""

    run_id: str
    generated_at: datetime
    window_start: datetime
    window_end: datetime
    policy: PlanPolicy
    pools: tuple[PoolPlan, ...]
    unplanned: tuple[QueueDemand, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def conflicts(self) -> tuple[PoolPlan, ...]:
        return tuple(p for p in self.pools if p.conflict is not None)

    @property
    def conflict_line(self) -> str | None:
        """The outcome of the conflicting pools in one line (None: no pool conflicts)."""
        if not self.conflicts:
            return None
        names = ", ".join(f"{p.pool.flavor}/{p.pool.resource}" for p in self.conflicts)
        return (f"{len(self.conflicts)} flavor/resource pool(s) in conflict keep their quotas ({names}); "
                "the other pools are planned")
