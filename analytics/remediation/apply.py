"""Guarded writes of quarantine decisions: Node taints by read-modify-write, DeviceTaintRules by apply.

Node: read it, honour the opt-out, send the whole ``spec.taints`` list with only our entry changed as a
JSON merge patch carrying the read ``resourceVersion``; a 409 means the Node changed: read it again and
retry, a bounded number of times. DeviceTaintRule: server-side apply of the whole object we own;
release deletes only the rules labelled ours. A 403 is reported with the RBAC to grant
(deploy/rbac/gpulens-remediator.yaml). Every decision gets one outcome: ``applied``, ``unchanged``,
``skipped``, ``refused``, ``held`` (circuit breaker), ``failed`` or ``unknown`` (no answer to a write:
it may have been applied).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from analytics.remediation.decide import Decision
from analytics.remediation.device_rules import DraApi, rule_object
from analytics.remediation.kueue_exposure import exposure_note
from analytics.remediation.live import NODES, opted_out
from analytics.remediation.plan import NodeEvidence
from analytics.remediation.policy import OPT_OUT_ANNOTATION, TAINT_KEY
from analytics.remediation.scope import ScopeChoice
from analytics.remediation.taints import our_taint, quarantine_notes, taint_patch, untaint_patch
from analytics.writers.base import RbacRule
from gpulens.core.kube_api import (
    ConflictError,
    ForbiddenError,
    KubernetesApiError,
    KubernetesClient,
    MalformedAnswerError,
    NoAnswerError,
    NotFoundError,
    segment,
)

RBAC = (
    RbacRule("", "nodes", ("get", "list", "patch"), cluster_scoped=True),
    RbacRule("", "pods", ("list",), cluster_scoped=True),
    RbacRule("resource.k8s.io", "resourceslices", ("list",), cluster_scoped=True),
    RbacRule("resource.k8s.io", "devicetaintrules", ("list", "patch", "delete"), cluster_scoped=True),
)
_PASSIVE = {"keep": "unchanged", "skip": "skipped", "refuse": "refused", "hold": "held"}


@dataclass(frozen=True)
class NodeOutcome:
    node: str
    action: str
    status: str
    """``applied``, ``unchanged``, ``skipped``, ``refused``, ``held``, ``failed`` or ``unknown``."""
    message: str
    attempts: int = 0

    @property
    def problem(self) -> bool:
        """Not done, or not known to be done: the run must not end as a success."""
        return self.status in ("failed", "unknown")


def forbidden(exc: ForbiddenError, what: str) -> str:
    return (f"forbidden: the API server refused to {exc.method.lower()} {what} ({exc.path}): {exc.message}. "
            "Grant the rules in deploy/rbac/gpulens-remediator.yaml to the identity gpulens runs as.")


def write_error(d: Decision, what: str, exc: KubernetesApiError, attempt: int) -> NodeOutcome:
    """The outcome of a write that raised: forbidden, may have been applied, or failed."""
    if isinstance(exc, ForbiddenError):
        return NodeOutcome(d.node, d.action, "failed", forbidden(exc, what), attempt)
    if isinstance(exc, NoAnswerError | MalformedAnswerError):
        return NodeOutcome(d.node, d.action, "unknown", f"may have been applied: {exc}", attempt)
    return NodeOutcome(d.node, d.action, "failed", str(exc), attempt)


class TaintApplier:
    """Applies quarantine decisions through a ``KubernetesClient``."""

    def __init__(self, api: KubernetesClient, *, clock: Callable[[], datetime], sleep: Callable[[float], None] = time.sleep,
                 max_attempts: int = 5, backoff_s: float = 0.2, dra: DraApi | None = None) -> None:
        self.api, self.clock, self.sleep = api, clock, sleep
        self.max_attempts, self.backoff_s = max_attempts, backoff_s
        self.dra = dra or DraApi(None, None)

    def apply(self, d: Decision, evidence: NodeEvidence | None, window: tuple[datetime, datetime], run_id: str,
              choice: ScopeChoice | None = None, rules: tuple[str, ...] = ()) -> NodeOutcome:
        if d.action not in ("taint", "untaint"):
            return NodeOutcome(d.node, d.action, _PASSIVE[d.action], d.reason)
        if d.action == "untaint":
            return self._release(d, rules)
        assert evidence is not None
        notes = quarantine_notes(evidence.text, window, run_id, self.clock())
        if choice is not None and choice.scope == "device":
            return self._device_taint(d, evidence, choice, notes)
        return self._node_write(d, lambda live: taint_patch(live, evidence.value, d.effect, notes), evidence.value)

    # -- Node taint: read-modify-write -----------------------------------------------------------------

    def _node_write(self, d: Decision, patch: Callable[[dict[str, Any]], dict[str, Any]], value: str = "") -> NodeOutcome:
        path = f"{NODES}/{segment(d.node)}"
        kueue: str | None = None
        for attempt in range(1, self.max_attempts + 1):
            try:
                live = self.api.get(path)
            except NotFoundError:
                return NodeOutcome(d.node, d.action, "failed", f"Node {d.node} not found", attempt)
            except ForbiddenError as exc:
                return NodeOutcome(d.node, d.action, "failed", forbidden(exc, f"Node {d.node}"), attempt)
            except KubernetesApiError as exc:  # a read: nothing was changed
                return NodeOutcome(d.node, d.action, "failed", str(exc), attempt)
            if opted_out(live.get("metadata", {})):
                return NodeOutcome(d.node, d.action, "skipped", f'opted out ({OPT_OUT_ANNOTATION}: "false")', attempt)
            current = our_taint(live)
            if d.action == "taint" and current is not None and current.get("effect") == d.effect \
                    and current.get("value") == value:
                return NodeOutcome(d.node, d.action, "unchanged", "already tainted", attempt)
            if d.action == "untaint" and current is None:
                return NodeOutcome(d.node, d.action, "unchanged", "no gpulens taint", attempt)
            if kueue is None:  # once, before the first write
                kueue = exposure_note(self.api, d.node) if d.action == "taint" else ""
            try:
                self.api.merge_patch(path, patch(live))
            except ConflictError:
                self.sleep(self.backoff_s * attempt)
                continue
            except KubernetesApiError as exc:
                return write_error(d, f"Node {d.node}", exc, attempt)
            what = (f"tainted {TAINT_KEY}={value}:{d.effect}, other taints kept{kueue}" if d.action == "taint"
                    else "taint and annotations removed, other taints kept")
            return NodeOutcome(d.node, d.action, "applied", what, attempt)
        return NodeOutcome(d.node, d.action, "failed", f"conflict persisted after {self.max_attempts} attempts",
                           self.max_attempts)

    # -- DeviceTaintRule -------------------------------------------------------------------------------

    def _device_taint(self, d: Decision, evidence: NodeEvidence, choice: ScopeChoice,
                      notes: dict[str, str]) -> NodeOutcome:
        assert self.dra.rules is not None
        done: list[str] = []
        for device in choice.devices:
            body = rule_object(self.dra.rules, d.node, device, evidence.value, d.effect, notes)
            name = body["metadata"]["name"]
            try:
                self.api.apply(self.dra.rule_path(name), body, force=True)
            except KubernetesApiError as exc:
                out = write_error(d, f"DeviceTaintRule {name}", exc, 1)
                return NodeOutcome(d.node, d.action, out.status, _so_far(done) + out.message, 1)
            done.append(f"{name} ({device.ref})")
        return NodeOutcome(d.node, d.action, "applied",
                           f"DeviceTaintRule {', '.join(done)}: {evidence.value}:{d.effect}; the Node stays schedulable", 1)

    def _release(self, d: Decision, rules: tuple[str, ...]) -> NodeOutcome:
        done: list[str] = []
        for name in rules:
            try:
                self.api.delete(self.dra.rule_path(name))
            except NotFoundError:
                pass
            except KubernetesApiError as exc:
                out = write_error(d, f"DeviceTaintRule {name}", exc, 1)
                return NodeOutcome(d.node, d.action, out.status, _so_far(done) + out.message, 1)
            done.append(name)
        node = self._node_write(d, untaint_patch)
        if done and node.status == "unchanged":
            return NodeOutcome(d.node, d.action, "applied", f"deleted DeviceTaintRule {', '.join(done)}", node.attempts)
        if done:
            return NodeOutcome(d.node, d.action, node.status, f"deleted DeviceTaintRule {', '.join(done)}; {node.message}",
                               node.attempts)
        return node


def _so_far(done: list[str]) -> str:
    return f"applied {', '.join(done)}; then " if done else ""
