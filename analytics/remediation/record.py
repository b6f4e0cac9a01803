"""Record what `gpulens remediate` decided and did, one row per node, in the ``remediation_outcomes`` table.

A dry run records its decisions too (outcome NULL), so the store says what was proposed, from which health
run and window, under which guard rails, and what ``--apply`` then did to each node.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from analytics.remediation.run import RemediationReport
from analytics.result_tables import column_names, ensure_table, insert_columns
from collector.store_errors import connect_store, reading_store


def outcome_columns(report: RemediationReport, decided_at: datetime) -> dict[str, list[object]]:
    """The report's rows, column-wise in the registry's order (a node with an outcome but no decision too)."""
    cols: dict[str, list[object]] = {name: [] for name in column_names("remediation_outcomes")}
    start, end = report.inputs.window
    outcomes = {o.node: o for o in report.outcomes}
    params = report.policy.model_dump_json()
    flavors = {c.node: c.flavor for c in report.inputs.cases}
    rows = [(d.node, d.flavor, d.action, d.scope if d.action != "skip" else "none", d.reason) for d in report.decisions]
    decided = {d.node for d in report.decisions}
    rows += [(o.node, flavors.get(o.node, ""), o.action, "node", o.message) for o in report.outcomes
             if o.node not in decided]
    for node, flavor, action, scope, reason in rows:
        ev = report.inputs.evidence.get(node)
        o = outcomes.get(node)
        row = {"run_id": report.inputs.run_id, "window_start": start, "window_end": end, "decided_at": decided_at,
               "mode": "apply" if report.applied else "dry-run", "node": node, "flavor": flavor, "action": action,
               "scope": scope, "reason": reason, "evidence": (ev.text or None) if ev else None,
               "outcome": o.status if o else None, "outcome_message": o.message if o else None,
               "parameters": params}
        for name in cols:
            cols[name].append(row[name])
    return cols


def record_outcomes(db: Path, report: RemediationReport, decided_at: datetime) -> int:
    """Append the report's rows to ``remediation_outcomes`` in one transaction; returns how many."""
    return record_columns(db, outcome_columns(report, decided_at))


def record_columns(db: Path, cols: dict[str, list[object]]) -> int:
    """Append rows given column-wise (:func:`outcome_columns`) to ``remediation_outcomes`` in one transaction."""
    with connect_store(db, read_only=False) as con, reading_store(db):
        ensure_table(con, "remediation_outcomes")
        con.execute("BEGIN")
        try:
            insert_columns(con, "remediation_outcomes", cols)
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    return len(cols["node"])
