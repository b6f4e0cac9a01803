"""Node bodies for server-side apply: our taint with its evidence in annotations, or nothing (untaint).

Server-side apply merges ``spec.taints`` by (key, effect), so the body lists only our taint and the
other taints of the Node stay as they are; applying a body without it removes the entry gpulens owns.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from gpulens.analytics.remediation.policy import EVIDENCE, RUN, TAINT_KEY, TAINTED_AT, WINDOW

_NOT_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


def taint_value(signal: str) -> str:
    """A taint value (a label value: 63 characters of [A-Za-z0-9_.-], alphanumeric at both ends) from a signal."""
    text = _NOT_VALUE.sub("-", signal.replace("_", "-")).strip("-_.")[:63].rstrip("-_.")
    return text or "unhealthy"


def taint(value: str, effect: str) -> dict[str, str]:
    return {"key": TAINT_KEY, "value": value, "effect": effect}


def taint_body(node: str, value: str, effect: str, evidence: str, window: tuple[datetime, datetime], run_id: str,
               now: datetime, *, resource_version: str | None = None) -> dict[str, Any]:
    """The apply body that adds our taint and states why (evidence, window, run, when)."""
    metadata: dict[str, Any] = {
        "name": node,
        "annotations": {
            EVIDENCE: evidence[:4000],
            WINDOW: f"{window[0].isoformat()}Z/{window[1].isoformat()}Z",
            RUN: run_id,
            TAINTED_AT: now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": {"taints": [taint(value, effect)]}}


def untaint_body(node: str, *, resource_version: str | None = None) -> dict[str, Any]:
    """The apply body that drops everything gpulens owns on the Node (our taint and annotations)."""
    metadata: dict[str, Any] = {"name": node}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata}


def our_taint(node: dict[str, Any]) -> dict[str, Any] | None:
    """Our taint on a live Node, if any."""
    for t in node.get("spec", {}).get("taints") or []:
        if t.get("key") == TAINT_KEY:
            return dict(t)
    return None
