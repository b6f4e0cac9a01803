"""Health evidence as one readable line: what was found first (worst first), then what was not measured, once."""

from __future__ import annotations

import json
from collections import Counter

_FOUND_ORDER = {"drain": 0, "warn": 1, "watch": 2, "info": 3}


def evidence_line(evidence_json: str | None) -> str:
    """``signal: reason`` items joined by '; ': found items by severity (drain, warn, watch, info), then each
    distinct "not measured" reason once, with how many GPUs it covers where more than one (a node's row)."""
    try:
        items = json.loads(evidence_json or "[]")
    except ValueError:
        return evidence_json or ""
    if not isinstance(items, list):
        return ""
    found = [e for e in items if isinstance(e, dict) and e.get("severity") in _FOUND_ORDER]
    found.sort(key=lambda e: _FOUND_ORDER[str(e["severity"])])  # stable: the stored order within a severity
    unmeasured = Counter(str(e.get("reason")) for e in items
                         if isinstance(e, dict) and e.get("severity") not in _FOUND_ORDER)
    parts = [f"{e.get('signal')}: {e.get('reason')}" for e in found]
    parts += [f"not measured: {reason}" + (f" (on {n} GPUs)" if n > 1 else "") for reason, n in unmeasured.items()]
    return "; ".join(parts)
