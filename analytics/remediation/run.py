"""``remediate``: plan taints from the latest health run, write the dry-run YAML, apply when asked.

Without ``--apply`` nothing is read from or written to a cluster: the plan assumes no Node carries our
taint yet. With ``--apply`` the live Nodes decide which are tainted or opted out before the caps apply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import yaml

from gpulens.analytics.remediation.apply import LiveNode, NodeOutcome, TaintApplier, live_nodes
from gpulens.analytics.remediation.decide import Decision, NodeCase, decide
from gpulens.analytics.remediation.plan import RemediationInputs, load_inputs
from gpulens.analytics.remediation.policy import RemediationPolicy
from gpulens.analytics.remediation.taints import taint_body, untaint_body
from gpulens.exporter.kube_api import KubernetesClient


@dataclass(frozen=True)
class RemediationReport:
    inputs: RemediationInputs
    policy: RemediationPolicy
    decisions: tuple[Decision, ...]
    outcomes: tuple[NodeOutcome, ...] = ()
    applied: bool = False

    def render(self) -> str:
        start, end = self.inputs.window
        lines = [f"health run {self.inputs.run_id}, window {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC; "
                 f"policy: at most {self.policy.max_share:.0%} of a flavor's nodes tainted, untaint after "
                 f"{self.policy.healthy_seconds / 3600:g} h healthy"]
        if not self.decisions:
            lines.append("no drain candidates and no gpulens taints: nothing to do")
        outcomes = {o.node: o for o in self.outcomes}
        for d in self.decisions:
            ev = self.inputs.evidence.get(d.node)
            lead = f", warned {ev.lead_seconds / 3600:.1f} h before failing" if ev and ev.lead_seconds else ""
            o = outcomes.get(d.node)
            done = f" -> {o.status}: {o.message}" if o else ""
            lines.append(f"  {d.action:8} {d.node} ({d.flavor}): {d.reason}{lead}{done}")
            if ev and d.action in ("taint", "keep", "refuse"):
                lines.extend(f"           {r}" for r in ev.reasons[:3])
        return "\n".join(lines)


def plan(db: Path, policy: RemediationPolicy, now: datetime, live: dict[str, LiveNode] | None = None) -> RemediationReport:
    """Decisions for the latest health run; ``live`` (from the cluster) says which Nodes are tainted or opted out."""
    inputs = load_inputs(db)
    cases = list(inputs.cases)
    if live is not None:
        cases = [_with_live(c, live[c.node]) for c in cases if c.node in live]
    effects = {c.node: ("NoExecute" if c.state in policy.no_execute_states else "NoSchedule") for c in cases}
    return RemediationReport(inputs, policy, tuple(decide(cases, policy, now, effects)))


def _with_live(case: NodeCase, live: LiveNode) -> NodeCase:
    return replace(case, tainted=live.tainted, tainted_at=live.tainted_at, opted_out=live.opted_out)


def write_dry_run(report: RemediationReport, out: Path, now: datetime) -> list[Path]:
    """One YAML file per Node to change, with the evidence as comments; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    start, end = report.inputs.window
    for d in report.decisions:
        if d.action not in ("taint", "untaint"):
            continue
        ev = report.inputs.evidence.get(d.node)
        if d.action == "taint" and ev is not None:
            body = taint_body(d.node, ev.value, d.effect, ev.text, report.inputs.window, report.inputs.run_id, now)
        else:
            body = untaint_body(d.node)
        head = [f"# gpulens remediate (dry run): {d.action} Node {d.node} ({d.flavor}): {d.reason}",
                f"# health run {report.inputs.run_id}, window {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC",
                "# apply: kubectl apply --server-side --field-manager=gpulens -f <this file>"]
        if ev is not None:
            head += [f"# evidence: {r}".replace("\n", " ") for r in ev.reasons[:10]]
        path = out / f"node-{d.node}.yaml"
        path.write_text("\n".join(head) + "\n" + yaml.safe_dump(body, sort_keys=False), encoding="utf-8")
        written.append(path)
    return written


def apply_plan(db: Path, policy: RemediationPolicy, api: KubernetesClient, clock: Callable[[], datetime],
               sleep: Callable[[float], None] | None = None) -> RemediationReport:
    """Read the live Nodes, decide, and apply each taint / untaint (one outcome per Node)."""
    live = live_nodes(api)
    report = plan(db, policy, clock(), live)
    applier = TaintApplier(api, clock=clock) if sleep is None else TaintApplier(api, clock=clock, sleep=sleep)
    missing = [NodeOutcome(c.node, "skip", "skipped", "not in the cluster")
               for c in report.inputs.cases if c.candidate and c.node not in live]
    outcomes = [applier.apply(d, report.inputs.evidence.get(d.node), report.inputs.window, report.inputs.run_id)
                for d in report.decisions]
    return replace(report, outcomes=tuple(outcomes + missing), applied=True)
