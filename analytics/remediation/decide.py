"""Which nodes to taint, keep, untaint or leave alone: pure decisions under the caps (property-tested).

Per flavor (the node pool a Kueue ResourceFlavor stands for): at most ``floor(max_share x nodes)``
nodes carry our taint at once, counting the ones tainted already; never the last node of the flavor
without it; the worst candidates first (drain, then warn, then watch; earlier warnings first). A node
opted out is skipped. A node we tainted that is no longer a candidate is untainted once it has been
healthy for ``healthy_seconds`` within the analysed window; until then its taint is kept.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpulens.analytics.remediation.policy import RemediationPolicy

_SEVERITY = {"drain": 0, "warn": 1, "watch": 2, "ok": 3}


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
    """Carries our taint now."""
    tainted_at: datetime | None = None
    opted_out: bool = False
    healthy_since: datetime | None = None
    """Start of the stretch of the window in which the node was not a candidate (None: unknown)."""


@dataclass(frozen=True)
class Decision:
    node: str
    flavor: str
    action: str
    """``taint``, ``keep`` (already tainted), ``untaint``, ``skip`` (opted out) or ``refuse`` (a cap)."""
    reason: str
    effect: str = "NoSchedule"


def decide(cases: list[NodeCase], policy: RemediationPolicy, now: datetime,
           effects: dict[str, str] | None = None) -> list[Decision]:
    """Decisions for every candidate or tainted node; ``effects`` maps a node to its taint effect."""
    effects = effects or {}
    by_flavor: dict[str, list[NodeCase]] = defaultdict(list)
    for c in cases:
        by_flavor[c.flavor].append(c)
    out: list[Decision] = []
    for flavor, members in sorted(by_flavor.items()):
        total = len(members)
        cap = math.floor(policy.max_share * total + 1e-9)
        tainted = sum(1 for c in members if c.tainted and not c.opted_out)
        for c in sorted((c for c in members if c.tainted and not c.candidate), key=lambda c: c.node):
            if c.opted_out:
                out.append(Decision(c.node, flavor, "skip", f'opted out ({"gpulens.io/remediate"}: "false")'))
                continue
            since = c.healthy_since
            if since is not None and now - since >= timedelta(seconds=policy.healthy_seconds):
                out.append(Decision(c.node, flavor, "untaint",
                                    f"healthy since {since:%Y-%m-%d %H:%M} (>= {policy.healthy_seconds / 3600:g} h)"))
                tainted -= 1
            else:
                out.append(Decision(c.node, flavor, "keep",
                                    f"no longer a candidate, but not yet healthy for {policy.healthy_seconds / 3600:g} h"))
        order = sorted((c for c in members if c.candidate),
                       key=lambda c: (_SEVERITY.get(c.state, 3), c.warning_ts or datetime.max, c.node))
        for c in order:
            if c.opted_out:
                out.append(Decision(c.node, flavor, "skip", 'opted out (gpulens.io/remediate: "false")'))
            elif c.tainted:
                out.append(Decision(c.node, flavor, "keep", f"already tainted ({c.state})", effects.get(c.node, "NoSchedule")))
            elif tainted + 1 > cap:
                out.append(Decision(c.node, flavor, "refuse",
                                    f"cap: {tainted} of {total} {flavor} node(s) tainted, at most "
                                    f"{policy.max_share:.0%} ({cap}) at once"))
            elif total - (tainted + 1) < 1:
                out.append(Decision(c.node, flavor, "refuse", f"the last untainted {flavor} node is never tainted"))
            else:
                out.append(Decision(c.node, flavor, "taint", f"{c.state}", effects.get(c.node, "NoSchedule")))
                tainted += 1
    return out
