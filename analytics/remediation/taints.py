"""Node taints by read-modify-write: the whole ``spec.taints`` list with only gpulens's entry changed.

``Node.spec.taints`` is an atomic list (``x-kubernetes-list-type: atomic``): whoever writes it writes
all of it, by server-side apply as much as by a patch. So gpulens never applies a partial list: it
reads the Node, changes the one entry it owns (key ``gpulens.io/gpu-unhealthy``), and sends the whole
list back as a JSON merge patch that carries the Node's ``resourceVersion`` (a 409 if the Node changed
since it was read), as ``kubectl taint`` does. Our annotations ride in the same patch; the untaint
patch removes our entry and our annotations (``null``) and nothing else.
"""

from __future__ import annotations

import re
import shlex
from datetime import datetime
from typing import Any

from analytics.remediation.policy import EVIDENCE, OUR_ANNOTATIONS, RUN, TAINT_KEY, TAINTED_AT, WINDOW

_NOT_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


def taint_value(signal: str) -> str:
    """A taint value (a label value: 63 characters of [A-Za-z0-9_.-], alphanumeric at both ends) from a signal."""
    text = _NOT_VALUE.sub("-", signal.replace("_", "-")).strip("-_.")[:63].rstrip("-_.")
    return text or "unhealthy"


def taint(value: str, effect: str) -> dict[str, str]:
    return {"key": TAINT_KEY, "value": value, "effect": effect}


def quarantine_notes(evidence: str, window: tuple[datetime, datetime], run_id: str, now: datetime) -> dict[str, str]:
    """Why a node or device is quarantined: the evidence, the window and run it came from, and when."""
    return {
        EVIDENCE: evidence[:4000],
        WINDOW: f"{window[0].isoformat()}Z/{window[1].isoformat()}Z",
        RUN: run_id,
        TAINTED_AT: now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def live_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(t) for t in (node.get("spec") or {}).get("taints") or []]


def our_taint(node: dict[str, Any]) -> dict[str, Any] | None:
    """Our taint on a live Node, if any."""
    return next((t for t in live_taints(node) if t.get("key") == TAINT_KEY), None)


def with_our_taint(taints: list[dict[str, Any]], value: str, effect: str) -> list[dict[str, Any]]:
    """``taints`` with our entry set to ``value:effect`` (in its place, or appended); every other entry as it was."""
    ours = taint(value, effect)
    if any(t.get("key") == TAINT_KEY for t in taints):
        out, seen = [], False
        for t in taints:
            if t.get("key") != TAINT_KEY:
                out.append(t)
            elif not seen:
                out.append(ours)
                seen = True
        return out
    return [*taints, ours]


def without_our_taint(taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for t in taints if t.get("key") != TAINT_KEY]


def taint_patch(live: dict[str, Any], value: str, effect: str, notes: dict[str, str]) -> dict[str, Any]:
    """The JSON merge patch that sets our taint on the Node ``live`` was read as, keeping every other taint."""
    return {"metadata": {"resourceVersion": live.get("metadata", {}).get("resourceVersion"), "annotations": notes},
            "spec": {"taints": with_our_taint(live_taints(live), value, effect)}}


def untaint_patch(live: dict[str, Any]) -> dict[str, Any]:
    """The JSON merge patch that removes our taint and our annotations from ``live``, and nothing else."""
    rest = without_our_taint(live_taints(live))
    present = (live.get("metadata", {}).get("annotations") or {}).keys() & set(OUR_ANNOTATIONS)
    meta: dict[str, Any] = {"resourceVersion": live.get("metadata", {}).get("resourceVersion")}
    if present:
        meta["annotations"] = {k: None for k in sorted(present)}
    return {"metadata": meta, "spec": {"taints": rest or None}}


def kubectl_commands(node: str, action: str, value: str = "", effect: str = "NoSchedule",
                     notes: dict[str, str] | None = None) -> list[str]:
    """What a person runs to do the same by hand (``kubectl taint`` reads and rewrites the whole list)."""
    n = shlex.quote(node)
    if action == "taint":
        cmds = [f"kubectl taint node {n} {TAINT_KEY}={value}:{effect} --overwrite"]
        if notes:
            cmds.append(f"kubectl annotate node {n} --overwrite "
                        + " ".join(shlex.quote(f"{k}={v}") for k, v in notes.items()))
        return cmds
    return [f"kubectl taint node {n} {TAINT_KEY}-",
            f"kubectl annotate node {n} " + " ".join(f"{k}-" for k in OUR_ANNOTATIONS)]
