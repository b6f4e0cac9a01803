"""The remediation plan from the store: drain candidates of the latest health run, by flavor, as NodeCases.

A node's flavor is its pool (the node group a Kueue ResourceFlavor stands for), else its GPU model.
The plan says which run and window it used; its evidence is the health table's, word for word.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb

from analytics.remediation.decide import NodeCase
from analytics.remediation.taints import taint_value
from collector.store_errors import connect_store, reading_store
from gpulens.core.errors import UserError


class NoHealthRun(UserError):
    """The store has no health run yet (``gpulens analyze`` has not run on it)."""


@dataclass(frozen=True)
class NodeEvidence:
    """Why a node is (or is not) a candidate: its state, the signal that names the taint and the reasons."""

    state: str
    signal: str
    reasons: tuple[str, ...]
    lead_seconds: float | None
    gpus: tuple[str, ...] = ()
    """The GPUs the flagged evidence names, worst first (what a device quarantine takes out)."""

    @property
    def value(self) -> str:
        return taint_value(self.signal)

    @property
    def text(self) -> str:
        return "; ".join(self.reasons)


@dataclass(frozen=True)
class RemediationInputs:
    run_id: str
    window: tuple[datetime, datetime]
    cases: tuple[NodeCase, ...]
    evidence: dict[str, NodeEvidence]


def load_inputs(db: Path) -> RemediationInputs:
    """Read the latest health run (``gpulens analyze`` wrote it) from the store, read-only."""
    if not db.is_file():
        raise UserError(f"--db {db}: no such store (run `gpulens demo` or `gpulens collect` and `gpulens analyze`)")
    with connect_store(db, read_only=True) as con, reading_store(db):
        if not _has_health_tables(con):
            raise NoHealthRun(f"--db {db}: no health results (run `gpulens analyze` first)")
        return _load(con, db)


def _has_health_tables(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``gpulens analyze`` ever wrote results here (its run and health tables exist)."""
    rows = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'main' "
        "AND table_name IN ('analysis_runs', 'health')"
    ).fetchone()
    return bool(rows and rows[0] == 2)


def _load(con: duckdb.DuckDBPyConnection, db: Path) -> RemediationInputs:
    run = con.execute(
        """
        SELECT r.run_id, r.window_start, r.window_end FROM analysis_runs r
        WHERE EXISTS (SELECT 1 FROM health h WHERE h.run_id = r.run_id)
        ORDER BY r.created_at DESC, r.window_end DESC LIMIT 1
        """
    ).fetchone()
    if run is None:
        raise NoHealthRun(f"--db {db}: no health results (run `gpulens analyze` first)")
    run_id, start, end = run
    rows = con.execute(
        """
        SELECT h.node, coalesce(n.pool, n.gpu_model, 'unknown') AS flavor, h.state, h.drain_candidate,
               h.warning_ts, h.evidence, h.last_evidence_ts, h.lead_seconds
        FROM health h LEFT JOIN (SELECT node, any_value(pool) AS pool, any_value(gpu_model) AS gpu_model
                                 FROM nodes GROUP BY node) n USING (node)
        WHERE h.run_id = ? AND h.scope = 'node' ORDER BY h.node
        """,
        [run_id],
    ).fetchall()
    cases, evidence = [], {}
    for node, flavor, state, candidate, warning_ts, ev_json, last_ev, lead in rows:
        ev = json.loads(ev_json)
        healthy_since = start if state == "ok" else (last_ev if state == "warn" and not candidate else None)
        cases.append(NodeCase(node, flavor, state, bool(candidate), warning_ts, healthy_since=healthy_since))
        evidence[node] = _evidence(state, ev, lead)
    return RemediationInputs(run_id, (start, end), tuple(cases), evidence)


def _evidence(state: str, ev: list[dict[str, object]], lead: float | None) -> NodeEvidence:
    """The worst evidence first: drain-class signals, then trends, then warnings."""
    rank = {"drain": 0, "watch": 1, "warn": 2}
    flagged = sorted((e for e in ev if e.get("severity") in rank), key=lambda e: rank[str(e["severity"])])
    reasons = tuple(f"{e.get('gpu_uuid', '')}: {e['reason']}".lstrip(": ") for e in flagged)
    signal = str(flagged[0]["signal"]) if flagged else "unhealthy"
    gpus = tuple(dict.fromkeys(str(e["gpu_uuid"]) for e in flagged if e.get("gpu_uuid")))
    return NodeEvidence(state, signal, reasons, lead, gpus)
