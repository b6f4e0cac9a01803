"""Which nodes to quarantine, keep, release or leave alone: pure decisions under the guard rails (property-tested).

Per flavor (the node pool a Kueue ResourceFlavor stands for): at most ``policy.cap(nodes)`` nodes
quarantined by gpulens at once, counting the ones already quarantined (the share rounded down, but one
node may always go while the flavor keeps a schedulable node); a Node taint never takes the last node
that can still take new work (cordoned, NotReady and nodes tainted NoSchedule/NoExecute by anyone
count as unable); the worst candidates first (drain, then warn, then watch; earlier warnings first).
A circuit breaker holds every new quarantine when more than ``breaker_share`` of a flavor turned
unhealthy within the breaker window (a fleet-wide fault, such as a driver roll-out, is not N broken
GPUs). A node opted out is skipped. A node we quarantined that is no longer a candidate is released
once it has been healthy for ``healthy_seconds``; until then it is kept.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from analytics.remediation.policy import OPT_OUT_ANNOTATION, RemediationPolicy

_SEVERITY = {"drain": 0, "warn": 1, "watch": 2, "ok": 3}
OPTED_OUT = f'opted out ({OPT_OUT_ANNOTATION}: "false")'


@dataclass(frozen=True)
class NodeCase:
    """One node as the health run and the cluster see it."""

    node: str
    flavor: str
    state: str
    candidate: bool
    """A drain candidate in the health table."""
    warning_ts: datetime | None = None
    tainted: bool = False
    """Quarantined by gpulens now (our Node taint or our DeviceTaintRules)."""
    tainted_at: datetime | None = None
    opted_out: bool = False
    healthy_since: datetime | None = None
    """Start of the stretch of the window in which the node was not a candidate (None: unknown)."""
    blocked: str | None = None
    """Why the node cannot take new work apart from our taint (cordoned, NotReady, another's taint)."""
    scope: str = "node"
    """How a new quarantine would be done: ``node`` (Node taint), ``device`` (DeviceTaintRule) or ``none``."""
    scope_reason: str = ""


@dataclass(frozen=True)
class Decision:
    node: str
    flavor: str
    action: str
    """``taint``, ``keep`` (already quarantined), ``untaint``, ``skip`` (opted out), ``refuse`` (a guard
    rail) or ``hold`` (the circuit breaker)."""
    reason: str
    effect: str = "NoSchedule"
    scope: str = "node"
    scope_reason: str = ""


@dataclass(frozen=True)
class Breaker:
    """The circuit breaker's verdict for one flavor."""

    flavor: str
    turned: int
    nodes: int
    tripped: bool


def breakers(cases: list[NodeCase], policy: RemediationPolicy, window_end: datetime) -> list[Breaker]:
    """Per flavor: how many nodes turned unhealthy (warned) within the breaker window, and whether that trips it.

    It trips above ``breaker_share`` of the flavor and at two nodes or more: one failing node is a
    broken GPU, not a fleet-wide fault.
    """
    since = window_end - timedelta(seconds=policy.breaker_seconds)
    by_flavor: dict[str, list[NodeCase]] = defaultdict(list)
    for c in cases:
        by_flavor[c.flavor].append(c)
    out = []
    for flavor, members in sorted(by_flavor.items()):
        turned = sum(1 for c in members if c.candidate and c.warning_ts is not None and c.warning_ts >= since)
        out.append(Breaker(flavor, turned, len(members),
                           turned >= 2 and turned > policy.breaker_share * len(members) + 1e-9))
    return out


def decide(cases: list[NodeCase], policy: RemediationPolicy, now: datetime,
           effects: dict[str, str] | None = None, *, window_end: datetime | None = None) -> list[Decision]:
    """Decisions for every candidate or quarantined node; ``effects`` maps a node to its taint effect."""
    effects = effects or {}
    tripped = [b for b in breakers(cases, policy, window_end or now) if b.tripped]
    by_flavor: dict[str, list[NodeCase]] = defaultdict(list)
    for c in cases:
        by_flavor[c.flavor].append(c)
    out: list[Decision] = []
    for _flavor, members in sorted(by_flavor.items()):
        out += _release(members, policy, now)
        out += _quarantine(members, policy, effects, tripped, out)
    return out


def _release(members: list[NodeCase], policy: RemediationPolicy, now: datetime) -> list[Decision]:
    """Untaint (or keep) the nodes we quarantined that are no longer candidates."""
    out = []
    hours = f"{policy.healthy_seconds / 3600:g} h"
    for c in sorted((c for c in members if c.tainted and not c.candidate), key=lambda c: c.node):
        since = c.healthy_since
        if c.opted_out:
            out.append(Decision(c.node, c.flavor, "skip", OPTED_OUT))
        elif since is not None and now - since >= timedelta(seconds=policy.healthy_seconds):
            out.append(Decision(c.node, c.flavor, "untaint", f"healthy since {since:%Y-%m-%d %H:%M} (>= {hours})"))
        else:
            out.append(Decision(c.node, c.flavor, "keep", f"no longer a candidate, but not yet healthy for {hours}"))
    return out


def _quarantine(members: list[NodeCase], policy: RemediationPolicy, effects: dict[str, str],
                tripped: list[Breaker], released: list[Decision]) -> list[Decision]:
    """Taint the worst candidates first, under the cap, the last-node rule and the breaker."""
    total = len(members)
    flavor = members[0].flavor
    cap = policy.cap(total)
    gone = {d.node for d in released if d.action == "untaint"}
    quarantined = sum(1 for c in members if c.tainted and not c.opted_out and c.node not in gone)
    unable = sum(1 for c in members if (c.tainted and c.node not in gone and c.scope != "device") or c.blocked)
    out = []
    order = sorted((c for c in members if c.candidate),
                   key=lambda c: (_SEVERITY.get(c.state, 3), c.warning_ts or datetime.max, c.node))
    for c in order:
        effect = effects.get(c.node, "NoSchedule")
        if c.opted_out:
            out.append(Decision(c.node, flavor, "skip", OPTED_OUT))
        elif c.tainted:
            out.append(Decision(c.node, flavor, "keep", f"already quarantined ({c.state})", effect, c.scope))
        elif c.scope == "none":
            out.append(Decision(c.node, flavor, "refuse", c.scope_reason, effect, c.scope, c.scope_reason))
        elif tripped:
            b = tripped[0]
            out.append(Decision(c.node, flavor, "hold",
                                f"circuit breaker: {b.turned} of {b.nodes} {b.flavor} node(s) turned unhealthy within "
                                f"{policy.breaker_seconds / 3600:g} h (> {policy.breaker_share:.0%}): looks fleet-wide "
                                "(a driver roll-out?), no new quarantine", effect, c.scope, c.scope_reason))
        elif quarantined + 1 > cap:
            out.append(Decision(c.node, flavor, "refuse", f"cap: {quarantined} of {total} {flavor} node(s) "
                                f"quarantined, at most {_cap_text(policy, total, cap)} at once",
                                effect, c.scope, c.scope_reason))
        elif c.scope == "node" and not c.blocked and total - (unable + 1) < 1:
            out.append(Decision(c.node, flavor, "refuse",
                                f"the last schedulable {flavor} node is never tainted ({unable} of {total} cannot "
                                "take new work)", effect, c.scope, c.scope_reason))
        else:
            out.append(Decision(c.node, flavor, "taint", c.state, effect, c.scope, c.scope_reason))
            quarantined += 1
            unable += 1 if c.scope == "node" and not c.blocked else 0
    return out


def _cap_text(policy: RemediationPolicy, total: int, cap: int) -> str:
    share = f"{policy.max_share:.0%} of {total}" + (" rounded down, at least one" if policy.max_share > 0 else "")
    count = f"; --max-nodes {policy.max_nodes}" if policy.max_nodes is not None else ""
    return f"{cap} ({share}{count})"
