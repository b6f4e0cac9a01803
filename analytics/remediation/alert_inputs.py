"""The remediation inputs of an alert: the latest health run, with what the firing alerts add since.

The health run gives the fleet (every node and its flavor, which the caps and the breaker count) and
its verdicts; a firing alert makes its node a drain candidate from the alert's start (``drain`` for a
hard fault, ``watch`` for an early warning, the worse of the two and the run's own state), with the
alert's words first in the evidence. A node whose alerts resolved is healthy from the resolution at the
earliest, so the healthy period before a release counts from there. Nothing here clears a candidate of
the health run: only the next ``gpulens analyze`` does. The window ends at the decision's time: the
alerts are evidence up to then.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from analytics.remediation.alerts import GpuAlert
from analytics.remediation.decide import NodeCase
from analytics.remediation.plan import NodeEvidence, RemediationInputs

_RANK = {"drain": 0, "warn": 1, "watch": 2, "ok": 3}


@dataclass(frozen=True)
class AlertInputs:
    inputs: RemediationInputs
    unknown: tuple[str, ...]
    """Nodes that alert but are not in the health run: no flavor, so no decision (the reason is logged)."""


def with_alerts(base: RemediationInputs, firing: list[GpuAlert], resolved: dict[str, datetime],
                now: datetime) -> AlertInputs:
    """``base`` with the firing alerts as candidates and ``resolved`` (node -> when its last alert ended)."""
    by_node: dict[str, list[GpuAlert]] = {}
    for a in firing:
        by_node.setdefault(a.node, []).append(a)
    cases, evidence = [], dict(base.evidence)
    for case in base.cases:
        alerts = by_node.get(case.node)
        if alerts:
            case, evidence[case.node] = _alerting(case, base.evidence.get(case.node), alerts)
        elif case.node in resolved and case.healthy_since is not None:
            case = replace(case, healthy_since=max(case.healthy_since, resolved[case.node]))
        cases.append(case)
    known = {c.node for c in base.cases}
    unknown = tuple(sorted(n for n in by_node if n not in known))
    window = (base.window[0], max(base.window[1], now))
    return AlertInputs(RemediationInputs(base.run_id, window, tuple(cases), evidence), unknown)


def _alerting(case: NodeCase, ev: NodeEvidence | None, alerts: list[GpuAlert]) -> tuple[NodeCase, NodeEvidence]:
    alerts = sorted(alerts, key=lambda a: (_RANK[a.state], a.starts_at, a.gpu))
    worst = alerts[0]
    own = case.state if case.candidate else "ok"
    state = min(own, worst.state, key=lambda s: _RANK.get(s, 3))
    starts = min(a.starts_at for a in alerts)
    warned = min(case.warning_ts, starts) if case.candidate and case.warning_ts else starts
    reasons = tuple(dict.fromkeys(a.reason for a in alerts))
    gpus = tuple(dict.fromkeys(a.gpu for a in alerts if a.gpu))
    signal = worst.signal if _RANK[worst.state] <= _RANK.get(own, 3) or ev is None else ev.signal
    before = ev if ev is not None and case.candidate else None
    merged = NodeEvidence(state, signal, reasons + (before.reasons if before else ()),
                          before.lead_seconds if before else None,
                          tuple(dict.fromkeys(gpus + (before.gpus if before else ()))))
    return replace(case, state=state, candidate=True, warning_ts=warned, healthy_since=None), merged
