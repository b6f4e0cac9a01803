"""The Kueue TAS advice in `gpulens recommend`'s words and as ``recommendations`` rows of scope ``topology``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from analytics.placement.tas_advice import QueueAdvice
from analytics.placement.tas_evidence import TasEvidence

SCOPE = "topology"


def _at_level(a: QueueAdvice, attr: str) -> int | None:
    values = [getattr(w.levels[a.level], attr) for w in a.workloads if a.level and a.level in w.levels]
    return max(values) if values else None


def topology_rows(evidence: TasEvidence | None, head: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One ``recommendations`` row per queue (``head`` holds the run's columns), by column name."""
    if evidence is None:
        return []
    days = (evidence.window_end - evidence.window_start).total_seconds() / 86_400
    rows = []
    for a in evidence.advice:
        models = "+".join(sorted({w.gpu_model for w in a.workloads}))
        detail = {**a.evidence(), "analysis_run": evidence.run_id,
                  "analysis_window": [evidence.window_start.isoformat(), evidence.window_end.isoformat()]}
        rows.append({
            **head, "scope": SCOPE, "tenant": a.tenant, "target_kind": a.queue_kind,
            "target_namespace": a.queue_namespace, "target_name": a.queue_name, "flavor": "", "resource": "topology",
            "gpu_model": models, "current_profile": None, "recommended_profile": a.label,
            "current_value": _at_level(a, "domains_spanned"), "recommended_value": _at_level(a, "min_domains"),
            "next_value": None, "lower_bound": None, "upper_bound": None, "action": a.action, "confidence": None,
            "confidence_label": None, "history_days": days, "sample_count": None, "evidence": json.dumps(detail),
            "reasons": list(a.reasons),
        })
    return rows


def render_topology(evidence: TasEvidence | None) -> list[str]:
    """The "Topology-aware scheduling" section of the recommend output."""
    if evidence is None:
        return ["", "Topology-aware scheduling (Kueue TAS): no analysis run with placement rows yet "
                    "(run `gpulens analyze` first)"]
    lines = ["", f"Topology-aware scheduling (Kueue TAS), from analysis run {evidence.run_id} "
                 f"({evidence.window_start:%Y-%m-%d %H:%M} .. {evidence.window_end:%Y-%m-%d %H:%M} UTC): "
                 f"{len(evidence.advice)} queue(s) with multi-GPU workloads"]
    for a in evidence.advice:
        what = f"{a.annotation}: {a.label}" if a.annotation else "no change"
        lines.append(f"  {a.ref} [{a.tenant}]: {a.action.upper()}  {what}")
        lines += [f"      - {reason}" for reason in a.reasons]
    return lines
