"""``remediate``: plan quarantines from the latest health run, write the dry-run files, apply when asked.

Without ``--apply`` nothing is read from or written to a cluster: the plan assumes no Node carries our
taint, every node can take new work and DRA devices are unknown (the report says so). With ``--apply``
the live Nodes (cordons, NotReady, everyone's taints, opt-outs), our DeviceTaintRules and the nodes'
ResourceSlices decide before the guard rails apply.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from analytics.remediation.apply import NodeOutcome, TaintApplier
from analytics.remediation.decide import Decision, NodeCase, breakers, decide
from analytics.remediation.device_rules import DraApi, discover, our_rules, rule_object
from analytics.remediation.live import LiveNode, live_nodes, pool_taints
from analytics.remediation.plan import RemediationInputs, load_inputs
from analytics.remediation.policy import RemediationPolicy
from analytics.remediation.scope import ScopeChoice, dry_run_scope, live_scope
from analytics.remediation.taints import kubectl_commands, quarantine_notes, taint
from gpulens.core.errors import UserError
from gpulens.core.kube_api import KubernetesApiError, KubernetesClient


@dataclass(frozen=True)
class RemediationReport:
    inputs: RemediationInputs
    policy: RemediationPolicy
    decisions: tuple[Decision, ...]
    outcomes: tuple[NodeOutcome, ...] = ()
    applied: bool = False
    scopes: dict[str, ScopeChoice] = field(default_factory=dict)
    dra: DraApi = DraApi(None, None)
    rules: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def header(self) -> list[str]:
        start, end = self.inputs.window
        p = self.policy
        count = f", at most {p.max_nodes} node(s)" if p.max_nodes is not None else ""
        lines = [f"health run {self.inputs.run_id}, window {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC",
                 f"policy: scope {p.scope}; per flavor at most {p.max_share:.0%} of its nodes quarantined (at least "
                 f"one){count}, never its last schedulable node; circuit breaker above {p.breaker_share:.0%} of a "
                 f"flavor turned unhealthy within {p.breaker_seconds / 3600:g} h; untaint after "
                 f"{p.healthy_seconds / 3600:g} h healthy"]
        if not self.applied:
            lines.append("dry run: no cluster read; cordoned, NotReady or otherwise tainted nodes are not known and "
                         "count as schedulable (--apply counts them from the live Nodes)")
        for b in breakers(list(self.inputs.cases), p, end):
            if b.tripped:
                lines.append(f"circuit breaker tripped: {b.turned} of {b.nodes} {b.flavor} node(s) turned unhealthy "
                             f"within {p.breaker_seconds / 3600:g} h of the window's end")
        return lines

    def render(self) -> str:
        lines = self.header()
        if not self.decisions:
            lines.append("no drain candidates and no gpulens quarantines: nothing to do")
        outcomes = {o.node: o for o in self.outcomes}
        for d in self.decisions:
            ev = self.inputs.evidence.get(d.node)
            lead = f", warned {ev.lead_seconds / 3600:.1f} h before failing" if ev and ev.lead_seconds else ""
            shown = d.scope_reason and d.scope_reason != d.reason and d.action in ("taint", "refuse", "hold")
            scope = f" [{d.scope_reason}]" if shown else ""
            o = outcomes.get(d.node)
            done = f" -> {o.status}: {o.message}" if o else ""
            lines.append(f"  {d.action:8} {d.node} ({d.flavor}): {d.reason}{lead}{scope}{done}")
            if ev and d.action in ("taint", "keep", "refuse", "hold"):
                lines.extend(f"           {r}" for r in ev.reasons[:3])
        lines.extend(f"  {o.action:8} {o.node}: {o.status}: {o.message}" for o in self.outcomes
                     if o.node not in {d.node for d in self.decisions})
        if self.applied:
            lines.append(self.closing())
        return "\n".join(lines)

    def closing(self) -> str:
        counts: dict[str, int] = {}
        for o in self.outcomes:
            counts[o.status] = counts.get(o.status, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "nothing to do"
        return f"outcome: {summary}"

    @property
    def problems(self) -> list[NodeOutcome]:
        return [o for o in self.outcomes if o.problem]


def _cases(inputs: RemediationInputs, live: dict[str, LiveNode] | None,
           scopes: dict[str, ScopeChoice]) -> list[NodeCase]:
    cases = list(inputs.cases)
    if live is not None:
        cases = [c for c in cases if c.node in live]
        pools = {f: pool_taints([live[c.node] for c in cases if c.flavor == f]) for f in {c.flavor for c in cases}}
        cases = [replace(c, tainted=live[c.node].quarantined, tainted_at=live[c.node].tainted_at,
                         opted_out=live[c.node].opted_out, blocked=live[c.node].blocked(pools[c.flavor]))
                 for c in cases]
    return [replace(c, scope=scopes[c.node].scope, scope_reason=scopes[c.node].reason) if c.node in scopes else c
            for c in cases]


def _decide(inputs: RemediationInputs, policy: RemediationPolicy, now: datetime, cases: list[NodeCase]) -> list[Decision]:
    effects = {c.node: ("NoExecute" if c.state in policy.no_execute_states else "NoSchedule") for c in cases}
    return decide(cases, policy, now, effects, window_end=inputs.window[1])


def plan(db: Path, policy: RemediationPolicy, now: datetime) -> RemediationReport:
    """The dry-run decisions for the latest health run (no cluster read)."""
    return plan_inputs(load_inputs(db), policy, now)


def plan_inputs(inputs: RemediationInputs, policy: RemediationPolicy, now: datetime) -> RemediationReport:
    """The dry-run decisions for ``inputs`` (no cluster read)."""
    scopes = {c.node: dry_run_scope(policy.scope) for c in inputs.cases if c.candidate}
    return RemediationReport(inputs, policy, tuple(_decide(inputs, policy, now, _cases(inputs, None, scopes))),
                             scopes=scopes)


def check_out(out: Path) -> None:
    """``--out`` must be a directory gpulens can write or create, checked before the first request to a
    cluster (nothing is created here: the files are written after the decisions)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: not a directory")
    existing = next((p for p in (out, *out.absolute().parents) if p.exists()), None)
    if existing is None or not existing.is_dir():
        raise UserError(f"--out {out}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"--out {out}: {existing} is not writable")


def write_dry_run(report: RemediationReport, out: Path, now: datetime) -> list[Path]:
    """One YAML file per quarantine to set or lift, with the evidence as comments; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for d in report.decisions:
        if d.action not in ("taint", "untaint"):
            continue
        for name, text in _files(report, d, now):
            path = out / name
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


def _files(report: RemediationReport, d: Decision, now: datetime) -> list[tuple[str, str]]:
    inputs = report.inputs
    start, end = inputs.window
    ev = inputs.evidence.get(d.node)
    outcome = next((f" -> {o.status}: {o.message}" for o in report.outcomes if o.node == d.node), "")
    head = [f"# gpulens remediate ({'--apply' if report.applied else 'dry run'}): {d.action} {d.node} ({d.flavor}): "
            f"{d.reason}{outcome}".replace("\n", " "),
            f"# health run {inputs.run_id}, window {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC"]
    if ev is not None:
        head += [f"# evidence: {r}".replace("\n", " ") for r in ev.reasons[:10]]
    notes = quarantine_notes(ev.text, inputs.window, inputs.run_id, now) if ev is not None and d.action == "taint" else {}
    choice = report.scopes.get(d.node)
    if d.action == "taint" and choice is not None and choice.scope == "device" and report.dra.rules and ev:
        rules = [rule_object(report.dra.rules, d.node, dev, ev.value, d.effect, notes) for dev in choice.devices]
        note = ["# a whole object gpulens owns: kubectl apply --server-side --field-manager=gpulens -f <this file>"]
        return [(f"devicetaintrule-{r['metadata']['name']}.yaml", "\n".join(head + note) + "\n" + yaml.safe_dump(r, sort_keys=False))
                for r in rules]
    value = ev.value if ev is not None else ""
    body: dict[str, Any] = {"node": d.node, "flavor": d.flavor, "action": d.action, "scope": "node",
                            "reason": d.reason}
    if d.action == "taint":
        body |= {"taint": taint(value, d.effect), "annotations": notes}
    else:
        body["deviceTaintRules"] = list(report.rules.get(d.node, ()))
    body["commands"] = kubectl_commands(d.node, d.action, value, d.effect, notes)
    note = ["# Node.spec.taints is an atomic list: never apply a Node body with only this taint (it would",
            "# remove every other taint). `gpulens remediate --apply` or the kubectl commands below read the",
            "# Node and rewrite the whole list with only the gpulens entry changed."]
    return [(f"node-{d.node}.yaml", "\n".join(head + note) + "\n" + yaml.safe_dump(body, sort_keys=False))]


def apply_plan(db: Path, policy: RemediationPolicy, api: KubernetesClient, clock: Callable[[], datetime],
               sleep: Callable[[float], None] | None = None) -> RemediationReport:
    """Read the live cluster, decide, and apply each quarantine / release (one outcome per node)."""
    return apply_inputs(load_inputs(db), policy, api, clock, sleep)


def apply_inputs(inputs: RemediationInputs, policy: RemediationPolicy, api: KubernetesClient,
                 clock: Callable[[], datetime], sleep: Callable[[float], None] | None = None) -> RemediationReport:
    """Read the live cluster, decide on ``inputs``, and apply each quarantine / release (one outcome per node)."""
    try:
        dra = discover(api)
    except KubernetesApiError:
        dra = DraApi(None, None)
    try:
        rules = our_rules(api, dra)
    except KubernetesApiError as exc:
        raise UserError(f"cannot list the DeviceTaintRules gpulens owns: {exc}") from exc
    live = live_nodes(api, rules)
    scopes = {c.node: live_scope(api, dra, policy.scope, c.node, inputs.evidence[c.node].gpus)
              for c in inputs.cases if c.candidate and c.node in live and not live[c.node].quarantined}
    decisions = _decide(inputs, policy, clock(), _cases(inputs, live, scopes))
    kwargs = {} if sleep is None else {"sleep": sleep}
    applier = TaintApplier(api, clock=clock, dra=dra, **kwargs)  # type: ignore[arg-type]
    missing = [NodeOutcome(c.node, "skip", "skipped", "not in the cluster")
               for c in inputs.cases if c.candidate and c.node not in live]
    outcomes = [applier.apply(d, inputs.evidence.get(d.node), inputs.window, inputs.run_id, scopes.get(d.node),
                              rules.get(d.node, ())) for d in decisions]
    return RemediationReport(inputs, policy, tuple(decisions), tuple(outcomes + missing), True, scopes, dra, rules)
