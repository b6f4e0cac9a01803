"""What the live cluster says about each Node: our quarantine, the opt-out, and whether it can take new work."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from analytics.remediation.policy import OPT_OUT_ANNOTATION, TAINT_KEY, TAINTED_AT
from analytics.remediation.taints import live_taints, our_taint
from gpulens.core.errors import UserError
from gpulens.core.kube_api import KubernetesApiError, KubernetesReads

NODES = "/api/v1/nodes"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class LiveNode:
    """One Node as listed: our taint, when we set it, the opt-out, and why it cannot take new work."""

    tainted: bool
    tainted_at: datetime | None
    opted_out: bool
    unready: tuple[str, ...] = ()
    """``cordoned``, ``NotReady``: why the Node takes no new work whatever the pods tolerate."""
    taints: tuple[str, ...] = ()
    """Others' NoSchedule / NoExecute taints, as ``key=value:effect``."""
    rules: tuple[str, ...] = ()
    """Names of the DeviceTaintRules gpulens owns for this Node's devices."""

    @property
    def quarantined(self) -> bool:
        return self.tainted or bool(self.rules)

    def blocked(self, pool_taints: frozenset[str]) -> str | None:
        """Why the Node cannot take new work, leaving our taint and the taints of its whole pool aside
        (a dedicated pool's taint, which every node of the flavor carries, is what its workloads tolerate)."""
        why = [*self.unready, *(f"tainted {t}" for t in self.taints if t not in pool_taints)]
        return ", ".join(why) or None


def opted_out(metadata: dict[str, Any]) -> bool:
    return str((metadata.get("annotations") or {}).get(OPT_OUT_ANNOTATION, "")).strip().lower() == "false"


def unready(node: dict[str, Any]) -> tuple[str, ...]:
    why = []
    if (node.get("spec") or {}).get("unschedulable"):
        why.append("cordoned")
    ready = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
    if ready and ready[0].get("status") != "True":
        why.append("NotReady")
    return tuple(why)


def blocking_taints(node: dict[str, Any]) -> tuple[str, ...]:
    """Others' taints that keep new pods off (NoSchedule, NoExecute); the cordon's own taint is ``cordoned``."""
    return tuple(f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in live_taints(node)
                 if t.get("key") not in (TAINT_KEY, "node.kubernetes.io/unschedulable")
                 and t.get("effect") in BLOCKING_EFFECTS)


def pool_taints(nodes: list[LiveNode]) -> frozenset[str]:
    """The blocking taints every node of a flavor carries (its dedicated-pool taints)."""
    sets = [frozenset(n.taints) for n in nodes]
    return frozenset.intersection(*sets) if sets else frozenset()


def _stamp(meta: dict[str, Any]) -> datetime | None:
    stamp = (meta.get("annotations") or {}).get(TAINTED_AT)
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ") if stamp else None
    except ValueError:
        return None


def live_nodes(api: KubernetesReads, rules: dict[str, tuple[str, ...]] | None = None) -> dict[str, LiveNode]:
    """Every Node's remediation state from one list (``UserError`` when the Nodes cannot be listed);
    ``rules`` names our DeviceTaintRules per Node."""
    try:
        listing = api.get(NODES)
    except KubernetesApiError as exc:
        raise UserError(f"cannot list Nodes: {exc}") from exc
    out = {}
    for item in listing.get("items", []):
        meta = item.get("metadata", {})
        name = meta.get("name", "")
        out[name] = LiveNode(our_taint(item) is not None, _stamp(meta), opted_out(meta), unready(item),
                             blocking_taints(item), (rules or {}).get(name, ()))
    return out
