"""Guarded server-side apply of taints: read the Node, honour the opt-out, apply with resourceVersion, retry on 409.

A 403 is reported with the RBAC to grant (deploy/rbac/gpulens-remediator.yaml); every Node gets one
outcome: ``applied``, ``unchanged``, ``skipped`` or ``failed``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpulens.analytics.remediation.decide import Decision
from gpulens.analytics.remediation.plan import NodeEvidence
from gpulens.analytics.remediation.policy import OPT_OUT_ANNOTATION, TAINTED_AT
from gpulens.analytics.remediation.taints import our_taint, taint_body, untaint_body
from gpulens.analytics.writers.base import RbacRule
from gpulens.core.errors import UserError
from gpulens.exporter.kube_api import (
    ConflictError,
    ForbiddenError,
    KubernetesApiError,
    KubernetesClient,
    NotFoundError,
    segment,
)

NODES = "/api/v1/nodes"
RBAC = (RbacRule("", "nodes", ("get", "list", "patch"), cluster_scoped=True),)


@dataclass(frozen=True)
class NodeOutcome:
    node: str
    action: str
    status: str
    """``applied``, ``unchanged``, ``skipped``, ``refused`` or ``failed``."""
    message: str
    attempts: int = 0


@dataclass(frozen=True)
class LiveNode:
    """What the cluster says about a Node: our taint, when we set it, whether it opted out."""

    tainted: bool
    tainted_at: datetime | None
    opted_out: bool


def opted_out(metadata: dict[str, Any]) -> bool:
    return str((metadata.get("annotations") or {}).get(OPT_OUT_ANNOTATION, "")).strip().lower() == "false"


def live_nodes(api: KubernetesClient) -> dict[str, LiveNode]:
    """Every Node's remediation state, from one list (``UserError`` when the Nodes cannot be listed)."""
    try:
        listing = api.get(NODES)
    except KubernetesApiError as exc:
        raise UserError(f"cannot list Nodes: {exc}") from exc
    out = {}
    for item in listing.get("items", []):
        meta = item.get("metadata", {})
        stamp = (meta.get("annotations") or {}).get(TAINTED_AT)
        try:
            at = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ") if stamp else None
        except ValueError:
            at = None
        out[meta.get("name", "")] = LiveNode(our_taint(item) is not None, at, opted_out(meta))
    return out


def forbidden(exc: ForbiddenError, node: str) -> str:
    return (f"forbidden: the API server refused to {exc.method.lower()} Node {node} ({exc.path}): {exc.message}. "
            "Grant the rules in deploy/rbac/gpulens-remediator.yaml to the identity gpulens runs as.")


class TaintApplier:
    """Applies taint and untaint decisions through a ``KubernetesClient``."""

    def __init__(self, api: KubernetesClient, *, clock: Callable[[], datetime], sleep: Callable[[float], None] = time.sleep,
                 max_attempts: int = 5, backoff_s: float = 0.2) -> None:
        self.api, self.clock, self.sleep = api, clock, sleep
        self.max_attempts, self.backoff_s = max_attempts, backoff_s

    def apply(self, d: Decision, evidence: NodeEvidence | None, window: tuple[datetime, datetime],
              run_id: str) -> NodeOutcome:
        if d.action not in ("taint", "untaint"):
            status = {"keep": "unchanged", "skip": "skipped", "refuse": "refused"}[d.action]
            return NodeOutcome(d.node, d.action, status, d.reason)
        path = f"{NODES}/{segment(d.node)}"
        for attempt in range(1, self.max_attempts + 1):
            try:
                live = self.api.get(path)
            except NotFoundError:
                return NodeOutcome(d.node, d.action, "failed", f"Node {d.node} not found", attempt)
            except ForbiddenError as exc:
                return NodeOutcome(d.node, d.action, "failed", forbidden(exc, d.node), attempt)
            meta = live.get("metadata", {})
            if opted_out(meta):
                return NodeOutcome(d.node, d.action, "skipped", f'opted out ({OPT_OUT_ANNOTATION}: "false")', attempt)
            current = our_taint(live)
            rv = meta.get("resourceVersion")
            if d.action == "taint":
                assert evidence is not None
                if current is not None and current.get("effect") == d.effect:
                    return NodeOutcome(d.node, d.action, "unchanged", "already tainted", attempt)
                body = taint_body(d.node, evidence.value, d.effect, evidence.text, window, run_id, self.clock(),
                                  resource_version=rv)
            else:
                if current is None:
                    return NodeOutcome(d.node, d.action, "unchanged", "no gpulens taint", attempt)
                body = untaint_body(d.node, resource_version=rv)
            try:
                self.api.apply(path, body, force=True)
            except ConflictError:
                self.sleep(self.backoff_s * attempt)
                continue
            except ForbiddenError as exc:
                return NodeOutcome(d.node, d.action, "failed", forbidden(exc, d.node), attempt)
            except KubernetesApiError as exc:
                return NodeOutcome(d.node, d.action, "failed", str(exc), attempt)
            what = (f"tainted {body['spec']['taints'][0]['key']}={body['spec']['taints'][0]['value']}:{d.effect}"
                    if d.action == "taint" else "taint removed")
            return NodeOutcome(d.node, d.action, "applied", what, attempt)
        return NodeOutcome(d.node, d.action, "failed", f"conflict persisted after {self.max_attempts} attempts",
                           self.max_attempts)
