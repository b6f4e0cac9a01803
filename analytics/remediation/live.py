"""What the live cluster says about each Node: our quarantine, the opt-out, and whether it can take new work."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpulens.analytics.remediation.policy import OPT_OUT_ANNOTATION, TAINT_KEY, TAINTED_AT
from gpulens.analytics.remediation.taints import live_taints, our_taint
from gpulens.core.errors import UserError
from gpulens.exporter.kube_api import KubernetesApiError, KubernetesReads

NODES = "/api/v1/nodes"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class LiveNode:
    """One Node as listed: our taint, when we set it, the opt-out, and why it cannot take new work."""

    tainted: bool
    tainted_at: datetime | None
    opted_out: bool
    blocked: str | None = None
    """``cordoned``, ``NotReady`` or ``tainted <key>:<effect>`` (someone else's); None: schedulable."""
    rules: tuple[str, ...] = ()
    """Names of the DeviceTaintRules gpulens owns for this Node's devices."""

    @property
    def quarantined(self) -> bool:
        return self.tainted or bool(self.rules)


def opted_out(metadata: dict[str, Any]) -> bool:
    return str((metadata.get("annotations") or {}).get(OPT_OUT_ANNOTATION, "")).strip().lower() == "false"


def blocked(node: dict[str, Any]) -> str | None:
    """Why a Node cannot take new work, leaving our own taint aside (None: it can)."""
    why = []
    if (node.get("spec") or {}).get("unschedulable"):
        why.append("cordoned")
    ready = [c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"]
    if ready and ready[0].get("status") != "True":
        why.append("NotReady")
    why += [f"tainted {t.get('key')}:{t.get('effect')}" for t in live_taints(node)
            if t.get("key") != TAINT_KEY and t.get("effect") in BLOCKING_EFFECTS
            and t.get("key") != "node.kubernetes.io/unschedulable"]
    return ", ".join(why) or None


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
        out[name] = LiveNode(our_taint(item) is not None, _stamp(meta), opted_out(meta), blocked(item),
                             (rules or {}).get(name, ()))
    return out
