"""Record a fleet plan in the ``quota_plan`` result table (one row per queue, flavor and resource), and what
``--apply`` did to each queue."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from analytics.result_tables import append_columns, column_names, ensure_table
from collector.store_errors import connect_store, reading_store

if TYPE_CHECKING:
    from analytics.plan.model import FleetPlan


def plan_columns(plan: FleetPlan) -> dict[str, list[object]]:
    """The plan's rows, column-wise in the registry's order."""
    cols: dict[str, list[object]] = {name: [] for name in column_names("quota_plan")}
    params = plan.policy.model_dump_json()
    for pool in plan.pools:
        conflict = "; ".join(pool.conflict.lines) if pool.conflict else None
        for q in pool.queues:
            d = q.demand
            row = {
                "run_id": plan.run_id, "window_start": plan.window_start, "window_end": plan.window_end,
                "generated_at": plan.generated_at, "cluster_queue": d.queue, "tenant": d.tenant,
                "flavor": d.flavor, "resource": d.resource, "current_quota": d.current, "planned_quota": q.planned,
                "target_quota": q.target, "capacity": pool.available, "physical_capacity": pool.pool.physical,
                "drained": pool.pool.drained, "reserve": pool.reserve, "demand_p50": d.demand_p50,
                "demand_p95": d.demand_p95, "demand_ask": d.demand, "pending_share": d.pending_share,
                "weight": q.weight, "lower_bound": q.lower, "upper_bound": q.upper, "binding_constraint": q.binding,
                "relax_gain": q.relax_gain, "explanation": q.explanation, "conflict": conflict, "parameters": params,
                "apply_outcome": None, "apply_message": None,
            }
            for name in cols:
                cols[name].append(row[name])
    return cols


def store_plan(con: duckdb.DuckDBPyConnection, plan: FleetPlan) -> int:
    """Replace this run's rows in ``quota_plan``; returns the row count."""
    ensure_table(con, "quota_plan")
    cols = plan_columns(plan)
    con.execute("BEGIN")
    try:
        con.execute("DELETE FROM quota_plan WHERE run_id = ?", [plan.run_id])
        append_columns(con, "quota_plan", cols)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return len(cols["run_id"])


def record_outcomes(db_path: str | Path, run_id: str, outcomes: Mapping[str, tuple[str, str]]) -> None:
    """Set ``apply_outcome`` and ``apply_message`` on the run's rows of each queue in ``outcomes``
    (queue name -> (status, message))."""
    path = Path(db_path)
    with connect_store(path, read_only=False) as con, reading_store(path):
        ensure_table(con, "quota_plan")
        con.executemany(
            "UPDATE quota_plan SET apply_outcome = ?, apply_message = ? WHERE run_id = ? AND cluster_queue = ?",
            [[status, message, run_id, queue] for queue, (status, message) in sorted(outcomes.items())],
        )
