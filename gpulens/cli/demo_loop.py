"""The decisions of `gpulens demo` (quota plan, its what-if, quarantine), each said in one line at the end."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analytics.miglayout.run import LayoutRun
    from analytics.plan.model import FleetPlan
    from analytics.plan.policy import PlanPolicy
    from analytics.recommend import RecommendationReport
    from analytics.remediation.run import RemediationReport

def plan_quotas(db: Path, policy: PlanPolicy, out_dir: Path) -> tuple[FleetPlan, list[Path]]:
    """Plan and record the fleet's quotas; write the dry-run ClusterQueue YAML of the pools that fit."""
    from analytics.plan.fleet import plan_store
    from analytics.plan.output import object_plans, write_plan_yaml

    plan = plan_store(db, policy)
    return plan, write_plan_yaml(plan, object_plans(plan), out_dir)


def what_if_n_plus_1_everywhere(db: Path, plan: FleetPlan) -> FleetPlan:
    """The same plan with an n+1 reserve on the pools dedicated to one tenant too; nothing is written or stored."""
    from analytics.plan.fleet import plan_store
    from analytics.plan.policy import PlanPolicy, ReservePolicy

    dedicated = sorted({p.pool.flavor for p in plan.pools if p.pool.dedicated_tenant is not None})
    return plan_store(db, PlanPolicy(reserve=ReservePolicy(flavors=dict.fromkeys(dedicated, "n+1"))), store=False)


def quarantine(db: Path, out_dir: Path) -> tuple[RemediationReport, list[Path]]:
    """`gpulens remediate` as a dry run under its default guard rails; the decisions are recorded in the store."""
    from analytics.remediation.policy import RemediationPolicy
    from analytics.remediation.record import record_outcomes
    from analytics.remediation.run import check_out, plan, write_dry_run

    check_out(out_dir)
    now = datetime.now(UTC).replace(tzinfo=None)
    report = plan(db, RemediationPolicy(), now)
    record_outcomes(db, report, now)
    return report, write_dry_run(report, out_dir, now)


def cut_line(report: RecommendationReport) -> str:
    """The first quota cut `recommend` proposes, with its evidence."""
    cuts = [q for q in report.quotas if q.action == "decrease" and q.changes]
    if not cuts:
        return "quota cut: none (no quota is above what its evidence asks)"
    q = cuts[0]
    more = f" (and {len(cuts) - 1} more)" if len(cuts) > 1 else ""
    return f"quota cut: {q.key} {q.current} -> {q.next_value}{more}; evidence: {q.reasons[0]}"


def plan_line(plan: FleetPlan, written: list[Path], out_dir: Path) -> str:
    """Whether the plan holds, what it changes and where its YAML is."""
    changed = sum(1 for p in plan.pools for q in p.queues if p.conflict is None and q.change)
    head = f"quota plan {plan.run_id}: {len(plan.pools)} flavor/resource pool(s), {changed} quota(s) change"
    where = f"{len(written)} ClusterQueue file(s) in {out_dir} (dry run)"
    if plan.conflict_line:
        return f"{head}; {plan.conflict_line}; {where}"
    return f"{head}, every pool fits its capacity; {where}"


def what_if_line(what_if: FleetPlan) -> str:
    """What an n+1 reserve on every flavor, the dedicated pools' too, would do to the plan."""
    if not what_if.conflicts:
        return "what if the dedicated pools kept an n+1 reserve too: the plan still fits"
    shorts = ", ".join(f"{p.pool.flavor}/{p.pool.resource} short {p.conflict.shortfall}"
                       for p in what_if.conflicts if p.conflict is not None)
    return (f"what if the dedicated pools kept an n+1 reserve too: CONFLICT in "
            f"{len(what_if.conflicts)} pool(s) ({shorts}): those would keep their quotas")


def quarantine_line(report: RemediationReport) -> str:
    """The quarantines `remediate` would make, and what its guard rails hold back."""
    taints = [d for d in report.decisions if d.action == "taint"]
    held = [d for d in report.decisions if d.action in ("refuse", "hold")]
    if not taints:
        return f"remediate (dry run): no quarantine ({len(held)} held back by the guard rails)"
    shown = "; ".join(f"{d.node} ({d.scope} taint: {d.reason})" for d in taints)
    return f"remediate (dry run, default guard rails): quarantine {shown}; {len(held)} held back by the guard rails"


def layout_line(layout: LayoutRun) -> str:
    """Which MIG layout changes fit, and what does not."""
    p = layout.plan
    if not p.changes and not p.reused:
        return "MIG layout: no change fits"
    gpus = ", ".join(f"{c.gpu.node} GPU {c.gpu.index}: {'+'.join(c.layout)}" for c in p.changes)
    unfit = f"; {len(p.unplaced)} workload(s) do not fit" if p.unplaced else ""
    return (f"MIG layout: fits {len(p.demands) - len(p.unplaced_workloads)} of {len(p.demands)} workload(s) "
            f"({gpus or 'on existing free MIG devices'}){unfit}")
