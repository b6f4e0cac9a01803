"""The Kueue TAS advice in `gpulens recommend`'s words and as ``recommendations`` rows of scope ``topology``."""

from __future__ import annotations

import json
from typing import Any

from gpulens.analytics.tas_advice import QueueAdvice
from gpulens.analytics.tas_evidence import TasEvidence

SCOPE = "topology"


def _at_level(a: QueueAdvice, attr: str) -> int | None:
    values = [getattr(w.levels[a.level], attr) for w in a.workloads if a.level and a.level in w.levels]
    return max(values) if values else None


def topology_rows(evidence: TasEvidence | None, head: list[Any]) -> list[list[Any]]:
    """One row per queue (columns of the ``recommendations`` table after ``head``'s six)."""
    if evidence is None:
        return []
    days = (evidence.window_end - evidence.window_start).total_seconds() / 86_400
    rows = []
    for a in evidence.advice:
        models = "+".join(sorted({w.gpu_model for w in a.workloads}))
        detail = {**a.evidence(), "analysis_run": evidence.run_id,
                  "analysis_window": [evidence.window_start.isoformat(), evidence.window_end.isoformat()]}
        rows.append(head + [
            SCOPE, a.tenant, a.queue_kind, a.queue_namespace, a.queue_name, "", "topology", models, None,
            a.label, _at_level(a, "domains_spanned"), _at_level(a, "min_domains"), None, None, None, a.action,
            None, None, days, None, json.dumps(detail), list(a.reasons),
        ])
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
