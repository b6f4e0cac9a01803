"""Read-only access to the store for the Streamlit app and the HTML report (one place for their SQL).

Every query is a constant string with bound parameters; tenant-controlled strings never enter SQL text.
A result table that analytics has not written yet raises :class:`AnalysisMissing`, whose message says
which command to run. Every analytics query reads one run: the one asked for (``run_id``), by
default the newest; a run that wrote no rows into a table gives an empty frame, never another run's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import polars as pl

from analytics.miglayout.run import LayoutRun, layout_from_store
from analytics.run_parameters import RunDescription, describe_run
from collector.store_errors import connect_store
from dashboards.report.evidence_text import evidence_line
from gpulens.core.errors import UserError
from gpulens.core.states import DeviceState

RESULT_TABLE_PRODUCERS: dict[str, str] = {
    "idle_capacity": "gpulens analyze",
    "fragmentation": "gpulens analyze",
    "isolation_risk": "gpulens analyze",
    "health": "gpulens analyze",
    "chargeback": "gpulens analyze",
    "analysis_runs": "gpulens analyze",
    "recommendations": "gpulens recommend",
    "quota_plan": "gpulens plan",
}
"""Result table -> the command that writes it (named in the message when the table is missing)."""


class AnalysisMissing(UserError):
    """A result table the page or report needs is not in the store yet."""

    def __init__(self, table: str, db_path: str, message: str | None = None) -> None:
        self.table = table
        command = RESULT_TABLE_PRODUCERS.get(table, "gpulens analyze")
        super().__init__(
            message or f"the store {db_path} has no '{table}' results yet: run `{command} --db {db_path}` first"
        )


def skipped_by(run_id: str, summary_json: str | None, table: str) -> str | None:
    """Why run ``run_id`` skipped ``table`` (its summary's ``skipped`` map), or ``None``."""
    if not summary_json:
        return None
    why = (json.loads(summary_json).get("skipped") or {}).get(table)
    return f"'{table}' was skipped by analysis run {run_id}: {why}" if why else None


def open_store(db_path: str | Path) -> duckdb.DuckDBPyConnection:
    """Open the store read-only; a missing or unreadable file becomes a one-line ``UserError``."""
    return connect_store(db_path, read_only=True)


class StoreReader:
    """Read-only queries over a store; threads may share a reader (each query takes its own cursor).

    A reader made by :meth:`open` holds one connection until :meth:`close` (a report run). One made by
    :meth:`per_query` opens the file for each query and closes it again, so a long-lived reader (the
    Streamlit app) never keeps DuckDB's file lock from a writer such as ``gpulens analyze``.
    """

    QUERIES = frozenset({
        "overview", "latest_run", "selected_run", "runs", "capacity_states", "tenant_usage", "chargeback_by_account", "cost_split",
        "isolation_terms", "isolation_scores", "health", "fragmentation_by_node", "recommendations",
        "workload_series", "recent_xids", "quota_plan", "placement_worse", "placement_stranded",
    })
    """The queries :meth:`run` may call (each returns a polars frame)."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection | None, db_path: str | Path, run_id: str | None = None,
        *, connect: Callable[[str], duckdb.DuckDBPyConnection] = open_store,
        layout_view: Callable[[LayoutRun], LayoutRun] | None = None,
    ) -> None:
        self._con = con
        self.db_path = str(db_path)
        self.run_id = run_id
        """The analysis run to show; None: the newest."""
        self._connect = connect
        self._layout_view = layout_view

    def reconnected(
        self, connect: Callable[[str], duckdb.DuckDBPyConnection],
        layout_view: Callable[[LayoutRun], LayoutRun] | None = None,
    ) -> StoreReader:
        """A reader of the same kind (held or per query) on the same file whose connections come from
        ``connect`` (how :mod:`dashboards.report.scope` narrows a reader to some tenants), showing
        the fleet's MIG layout plan through ``layout_view``."""
        return StoreReader(None if self._con is None else connect(self.db_path), self.db_path, self.run_id,
                           connect=connect, layout_view=layout_view)

    @classmethod
    def open(cls, db_path: str | Path, run_id: str | None = None) -> StoreReader:
        """A reader holding one read-only connection on ``db_path``, showing ``run_id`` (default the newest)."""
        return cls(open_store(db_path), db_path, run_id)

    @classmethod
    def per_query(cls, db_path: str | Path, run_id: str | None = None) -> StoreReader:
        """A reader that opens ``db_path`` read-only for each query (checks now that it opens)."""
        open_store(db_path).close()
        return cls(None, db_path, run_id)

    def close(self) -> None:
        """Close the held connection, if any."""
        if self._con is not None:
            self._con.close()

    def run(self, query_name: str, /, **params: object) -> pl.DataFrame:
        """``self.<query_name>(**params)`` with one connection for all of its statements.

        A per-query reader opens the file once for the call (not once per statement) and closes it.
        """
        if query_name not in self.QUERIES:
            raise ValueError(f"unknown store query {query_name!r} (known: {', '.join(sorted(self.QUERIES))})")
        if self._con is not None:
            return getattr(self, query_name)(**params)
        held = StoreReader(self._connect(self.db_path), self.db_path, self.run_id, connect=self._connect,
                           layout_view=self._layout_view)
        try:
            return getattr(held, query_name)(**params)
        finally:
            held.close()

    @contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._con is not None:
            yield self._con.cursor()
            return
        con = self._connect(self.db_path)
        try:
            yield con
        finally:
            con.close()

    # -- plumbing ---------------------------------------------------------------------------------------

    def tables(self) -> set[str]:
        """Names of the tables in the store's main schema."""
        with self._cursor() as cur:
            rows = cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()
        return {str(r[0]) for r in rows}

    def columns(self, table: str) -> set[str]:
        """Column names of ``table`` (empty when it does not exist)."""
        with self._cursor() as cur:
            rows = cur.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' AND table_name = ?",
                [table],
            ).fetchall()
        return {str(r[0]) for r in rows}

    def has(self, table: str) -> bool:
        """Whether ``table`` exists and holds at least one row."""
        if table not in self.tables():
            return False
        # table is one of our own constant names, never user input
        with self._cursor() as cur:
            row = cur.execute(f'SELECT count(*) FROM (SELECT 1 FROM "{table}" LIMIT 1)').fetchone()  # noqa: S608
        return bool(row and row[0])

    def require(self, *tables: str) -> None:
        """Raise :class:`AnalysisMissing` for the first of ``tables`` that is absent or empty."""
        for table in tables:
            if not self.has(table):
                raise AnalysisMissing(table, self.db_path, self._skipped(table))

    def _skipped(self, table: str) -> str | None:
        """The newest run's reason for skipping ``table`` (e.g. a Kueue-only store), if it did."""
        if table == "analysis_runs" or not self.has("analysis_runs"):
            return None
        run = self.selected_run()
        return skipped_by(str(run["run_id"][0]), run["summary"][0], table)

    def frame(self, sql: str, params: list[object] | dict[str, object] | None = None) -> pl.DataFrame:
        """Run a constant ``sql`` with bound ``params`` (positional or named) and return a polars frame."""
        with self._cursor() as cur:
            return cur.sql(sql, params=params or None).pl()

    # -- straight from the store's facts ----------------------------------------------------------------

    def overview(self) -> pl.DataFrame:
        """One row: fleet size (nodes, gpus, devices, tenants, total_ge) and the sampled window."""
        self.require_store()
        return self.frame(
            """
            SELECT (SELECT count(*) FROM nodes) AS nodes, (SELECT count(*) FROM gpus) AS gpus,
                   (SELECT count(*) FROM devices) AS devices,
                   (SELECT count(DISTINCT tenant) FROM allocations) AS tenants,
                   (SELECT sum(gpu_equivalents) FROM devices) AS total_ge,
                   (SELECT min(ts) FROM device_samples) AS first_sample,
                   (SELECT max(ts) FROM device_samples) AS last_sample
            """
        )

    def require_store(self) -> None:
        """Raise a ``UserError`` when the file is not a gpulens store (no facts tables)."""
        missing = {"nodes", "devices", "device_samples", "allocations"} - self.tables()
        if missing:
            raise UserError(
                f"{self.db_path} is not a gpulens store (missing {', '.join(sorted(missing))}): "
                f"run `gpulens demo` or `gpulens collect --db {self.db_path}` first"
            )

    def recent_xids(self, limit: int = 200) -> pl.DataFrame:
        """The latest XID events: ``ts, node, gpu_uuid, device_id, code, count, detail``."""
        self.require_store()
        return self.frame(
            """
            SELECT ts, node, gpu_uuid, device_id, code, count, detail FROM events
            WHERE kind = 'xid' ORDER BY ts DESC LIMIT ?
            """,
            [limit],
        )

    # -- analytics results (latest run) -----------------------------------------------------------------

    def latest_run(self) -> pl.DataFrame:
        """The newest analysis run: ``run_id, window_start, window_end, bucket_seconds, parameters, summary``."""
        self.require("analysis_runs")
        return self.frame(
            """
            SELECT run_id, window_start, window_end, bucket_seconds, CAST(parameters AS VARCHAR) AS parameters,
                   CAST(summary AS VARCHAR) AS summary, created_at
            FROM analysis_runs ORDER BY created_at DESC, window_end DESC LIMIT 1
            """
        )

    def runs(self) -> pl.DataFrame:
        """Every analysis run, newest first: ``run_id, created_at, window_start, window_end, bucket_seconds``."""
        self.require("analysis_runs")
        return self.frame(
            """
            SELECT run_id, created_at, window_start, window_end, bucket_seconds FROM analysis_runs
            ORDER BY created_at DESC, window_end DESC, run_id
            """
        )

    def selected_run(self) -> pl.DataFrame:
        """The run this reader shows (``run_id``, else the newest), with the columns of :meth:`latest_run`.

        An unknown ``run_id`` is a ``UserError`` that lists the runs the store holds.
        """
        if self.run_id is None:
            return self.latest_run()
        self.require("analysis_runs")
        run = self.frame(
            """
            SELECT run_id, window_start, window_end, bucket_seconds, CAST(parameters AS VARCHAR) AS parameters,
                   CAST(summary AS VARCHAR) AS summary, created_at
            FROM analysis_runs WHERE run_id = ?
            """,
            [self.run_id],
        )
        if run.height == 0:
            known = ", ".join(self.runs()["run_id"].head(10).to_list())
            raise UserError(f"--run-id {self.run_id}: no such analysis run in {self.db_path} (runs, newest first: {known})")
        return run

    def describe_run(self) -> RunDescription:
        """Window, bucket, threshold, price source and non-default parameters of the run shown."""
        run = self.selected_run().row(0, named=True)
        return describe_run(
            str(run["run_id"]), run["window_start"], run["window_end"], int(run["bucket_seconds"]), run["parameters"]
        )

    def _run_id(self, table: str) -> str:
        """The run shown; ``table`` must exist (an analysis has written it), though it may hold no rows of this
        run (that analysis found nothing): then the query gives an empty frame, never another run's rows."""
        if table not in self.tables():
            raise AnalysisMissing(table, self.db_path, self._skipped(table))
        run = self.selected_run()
        skipped = skipped_by(str(run["run_id"][0]), run["summary"][0], table)
        if skipped is not None:
            raise AnalysisMissing(table, self.db_path, skipped)
        return str(run["run_id"][0])

    def capacity_states(self, max_points: int | None = None) -> pl.DataFrame:
        """Average GPU-equivalents per state in each time bucket, fleet-wide (from ``idle_capacity``).

        Columns: ``bucket`` (start, UTC) and one column per state: ``allocated-active``,
        ``allocated-idle``, ``allocated-unmeasured``, ``unallocated``, ``unknown``. With ``max_points``,
        neighbouring buckets are averaged into wider ones so that at most that many rows remain.
        """
        run_id = self._run_id("idle_capacity")
        states = list(DeviceState)
        per_state = ", ".join(f"sum(ge_hours) FILTER (WHERE state = $s{i}) / any_value(h) AS s{i}" for i in range(len(states)))
        frame = self.frame(
            f"""
            SELECT bucket_start AS bucket, {per_state}
            FROM (SELECT *, epoch(bucket_end - bucket_start) / 3600.0 AS h FROM idle_capacity WHERE run_id = $run)
            GROUP BY bucket_start ORDER BY bucket_start
            """,  # noqa: S608 - only numbered parameters and column positions are formatted in
            {"run": run_id, **{f"s{i}": s.value for i, s in enumerate(states)}},
        ).fill_null(0.0).rename({f"s{i}": s.value for i, s in enumerate(states)})
        if max_points is None or frame.height <= max_points:
            return frame
        bucket_seconds = int(self.selected_run()["bucket_seconds"][0])
        per_point = -(-frame.height // max_points)  # ceil: buckets averaged into one point
        return (
            frame.group_by_dynamic("bucket", every=f"{per_point * bucket_seconds}s", start_by="datapoint")
            .agg(pl.exclude("bucket").mean())
            .sort("bucket")
        )

    def tenant_usage(self) -> pl.DataFrame:
        """Per tenant over the window: GE-hours by state, their cost, and the idle share of held GE-hours.

        Columns: ``tenant, active_ge_hours, idle_ge_hours, unmeasured_ge_hours, held_ge_hours,
        idle_cost_usd, held_cost_usd, idle_share`` (idle / held GE-hours), largest idle first. Money is
        the chargeback's (FOCUS ``BilledCost``, cents reconciled by largest remainder to the fleet
        total), the one source of every money figure, so it adds up with the cost split to the cent;
        NULL where all of the tenant's (idle) GE-hours are on unpriced models.
        """
        run_id = self._run_id("idle_capacity")
        if "chargeback" not in self.tables():
            raise AnalysisMissing("chargeback", self.db_path)
        return self.frame(
            """
            WITH hours AS (
                SELECT tenant,
                       coalesce(sum(ge_hours) FILTER (WHERE state = $active), 0) AS active_ge_hours,
                       coalesce(sum(ge_hours) FILTER (WHERE state = $idle), 0) AS idle_ge_hours,
                       coalesce(sum(ge_hours) FILTER (WHERE state = $unmeasured), 0) AS unmeasured_ge_hours,
                       sum(ge_hours) AS held_ge_hours,
                       count(*) FILTER (WHERE state = $idle AND cost_usd IS NOT NULL) AS idle_priced,
                       count(*) FILTER (WHERE cost_usd IS NOT NULL) AS held_priced
                FROM idle_capacity
                WHERE run_id = $run AND tenant IS NOT NULL AND state IN ($active, $idle, $unmeasured)
                GROUP BY tenant
            ),
            money AS (
                SELECT x_Tenant AS tenant,
                       coalesce(sum(BilledCost) FILTER (WHERE x_CostState = 'idle'), 0) AS idle_cost,
                       coalesce(sum(BilledCost) FILTER (WHERE x_CostState IN ('active', 'idle', 'unmeasured')), 0)
                           AS held_cost
                FROM chargeback WHERE run_id = $run AND x_Tenant IS NOT NULL GROUP BY x_Tenant
            )
            SELECT h.tenant, h.active_ge_hours, h.idle_ge_hours, h.unmeasured_ge_hours, h.held_ge_hours,
                   -- held (or idle) only on unpriced models: no money known, not $0
                   CASE WHEN h.idle_ge_hours > 0 AND h.idle_priced = 0 THEN NULL
                        ELSE CAST(coalesce(m.idle_cost, 0) AS DOUBLE) END AS idle_cost_usd,
                   CASE WHEN h.held_priced = 0 THEN NULL ELSE CAST(coalesce(m.held_cost, 0) AS DOUBLE) END
                       AS held_cost_usd,
                   h.idle_ge_hours / nullif(h.held_ge_hours, 0) AS idle_share
            FROM hours h LEFT JOIN money m USING (tenant)
            ORDER BY h.idle_ge_hours DESC, h.tenant
            """,
            {"run": run_id, "active": DeviceState.ALLOCATED_ACTIVE.value, "idle": DeviceState.ALLOCATED_IDLE.value,
             "unmeasured": DeviceState.ALLOCATED_UNMEASURED.value},
        )

    def chargeback_by_account(self) -> pl.DataFrame:
        """Billed cost per sub-account (tenant, ``__unallocated__``, ``__unknown__``) split by cost state.

        Columns: ``account, tenant`` (NULL for the fleet's own lines), ``state, billed_usd, ge_hours``.
        """
        run_id = self._run_id("chargeback")
        return self.frame(
            """
            SELECT SubAccountName AS account, any_value(x_Tenant) AS tenant, x_CostState AS state,
                   CAST(sum(BilledCost) AS DOUBLE) AS billed_usd, sum(x_GeHours) AS ge_hours
            FROM chargeback WHERE run_id = ?
            GROUP BY SubAccountName, x_CostState ORDER BY account, state
            """,
            [run_id],
        )

    def chargeback_index(self, grid_gco2_per_kwh: float) -> pl.DataFrame:
        """Per account over the window: billed cost, its share of the fleet cost, energy and CO2e.

        Columns: ``account, tenant`` (NULL for ``__unallocated__`` / ``__unknown__``), ``billed_usd, share,
        idle_usd, shared_unallocated_usd, ge_hours, energy_kwh, energy_coverage, co2e_kg``; tenants by cost,
        then the fleet's own accounts. Money is the chargeback's cents (they add up to the fleet total);
        energy is :func:`~analytics.tenant_energy.tenant_energy` over the run's window (NULL where not
        measured; the unallocated energy only where the chargeback has an unallocated account).
        """
        from analytics.tenant_energy import tenant_energy

        run_id = self._run_id("chargeback")
        money = self.frame(
            """
            SELECT SubAccountName AS account, any_value(x_Tenant) AS tenant,
                   CAST(sum(BilledCost) AS DOUBLE) AS billed_usd,
                   CAST(coalesce(sum(BilledCost) FILTER (WHERE x_CostState = 'idle'), 0) AS DOUBLE) AS idle_usd,
                   CAST(coalesce(sum(BilledCost) FILTER (WHERE x_CostState = 'shared-unallocated'), 0) AS DOUBLE)
                       AS shared_unallocated_usd,
                   sum(x_GeHours) AS ge_hours
            FROM chargeback WHERE run_id = ? GROUP BY SubAccountName
            """,
            [run_id],
        )
        run = self.describe_run()
        with self._cursor() as cur:
            energy = tenant_energy(cur, run.window_start, run.window_end, grid_gco2_per_kwh)
        energy_frame = pl.DataFrame(
            [(e.account, e.energy_kwh, e.energy_coverage, e.co2e_kg) for e in energy],
            schema={"account": pl.Utf8, "energy_kwh": pl.Float64, "energy_coverage": pl.Float64,
                    "co2e_kg": pl.Float64},
            orient="row",
        )
        total = float(money["billed_usd"].sum() or 0.0)
        return (
            money.join(energy_frame, on="account", how="left")
            .with_columns(share=pl.col("billed_usd") / total if total else pl.lit(None, dtype=pl.Float64))
            .sort([pl.col("tenant").is_null(), pl.col("billed_usd"), pl.col("account")], descending=[False, True, False])
            .select("account", "tenant", "billed_usd", "share", "idle_usd", "shared_unallocated_usd", "ge_hours",
                    "energy_kwh", "energy_coverage", "co2e_kg")
        )

    def chargeback_by_workload(self, limit: int) -> pl.DataFrame:
        """The ``limit`` workloads charged most: ``tenant, namespace, workload_kind, workload, billed_usd,
        idle_usd, ge_hours`` (the chargeback's held lines; empty for a store analysed before workload lines)."""
        run_id = self._run_id("chargeback")
        if "x_Workload" not in self.columns("chargeback"):
            return pl.DataFrame(schema={"tenant": pl.Utf8, "namespace": pl.Utf8, "workload_kind": pl.Utf8,
                                        "workload": pl.Utf8, "billed_usd": pl.Float64, "idle_usd": pl.Float64,
                                        "ge_hours": pl.Float64})
        return self.frame(
            """
            SELECT x_Tenant AS tenant, x_Namespace AS namespace, x_WorkloadKind AS workload_kind,
                   x_Workload AS workload, CAST(sum(BilledCost) AS DOUBLE) AS billed_usd,
                   CAST(coalesce(sum(BilledCost) FILTER (WHERE x_CostState = 'idle'), 0) AS DOUBLE) AS idle_usd,
                   sum(x_GeHours) AS ge_hours
            FROM chargeback WHERE run_id = ? AND x_Tenant IS NOT NULL AND x_Namespace IS NOT NULL
            GROUP BY ALL ORDER BY billed_usd DESC, tenant, namespace, workload_kind, workload LIMIT ?
            """,
            [run_id, limit],
        )

    def cost_split(self) -> pl.DataFrame:
        """Fleet cost by state over the window: ``state, billed_usd, ge_hours`` (largest first)."""
        run_id = self._run_id("chargeback")
        return self.frame(
            """
            SELECT x_CostState AS state, CAST(sum(BilledCost) AS DOUBLE) AS billed_usd, sum(x_GeHours) AS ge_hours
            FROM chargeback WHERE run_id = ? GROUP BY state ORDER BY billed_usd DESC
            """,
            [run_id],
        )

    def write_focus(self, out_dir: Path) -> list[Path]:
        """Write the newest run's FOCUS chargeback as CSV and Parquet into ``out_dir`` (analytics' exporter)."""
        from analytics.chargeback import write_focus

        run_id = self._run_id("chargeback")
        with self._cursor() as cur:
            return write_focus(cur, run_id, out_dir)

    def focus_rows(self) -> int:
        """Number of chargeback lines of the newest run."""
        run_id = self._run_id("chargeback")
        with self._cursor() as cur:
            row = cur.execute("SELECT count(*) FROM chargeback WHERE run_id = ?", [run_id]).fetchone()
        return int(row[0]) if row else 0

    def isolation_terms(self, scope: str) -> pl.DataFrame:
        """Isolation-risk terms, one row per subject and term: ``subject, score, term, points, reason``.

        ``scope`` is ``'device'`` (subject = ``node/gpu_uuid``) or ``'tenant'``; highest score first.
        """
        if scope not in ("device", "tenant"):
            raise ValueError(f"unknown isolation-risk scope {scope!r}")
        run_id = self._run_id("isolation_risk")
        return self.frame(
            """
            WITH rows AS (
                SELECT CASE WHEN scope = 'tenant' THEN tenant ELSE coalesce(node, '?') || '/' || gpu_uuid END
                           AS subject,
                       score, sharing_mode,
                       unnest(from_json(terms, '[{"term": "VARCHAR", "points": "DOUBLE", "reason": "VARCHAR"}]'))
                           AS t
                FROM isolation_risk WHERE run_id = ? AND scope = ?
            )
            SELECT subject, score, sharing_mode, t.term AS term, t.points AS points, t.reason AS reason
            FROM rows ORDER BY score DESC, subject, points DESC
            """,
            [run_id, scope],
        )

    def isolation_scores(self, scope: str) -> pl.DataFrame:
        """Isolation-risk scores, subjects without any term included: ``subject, score, sharing_mode``."""
        if scope not in ("device", "tenant"):
            raise ValueError(f"unknown isolation-risk scope {scope!r}")
        run_id = self._run_id("isolation_risk")
        return self.frame(
            """
            SELECT CASE WHEN scope = 'tenant' THEN tenant ELSE coalesce(node, '?') || '/' || gpu_uuid END AS subject,
                   score, sharing_mode
            FROM isolation_risk WHERE run_id = ? AND scope = ? ORDER BY score DESC, subject
            """,
            [run_id, scope],
        )

    def health(self) -> pl.DataFrame:
        """GPU and node health: ``scope, node, gpu_uuid, state, drain_candidate, evidence`` (worst first), and the
        early warning: ``trend_start_ts, warning_ts, failure_ts, lead_hours`` (NULL where there is none).

        ``evidence`` is a readable string: ``signal: reason`` items joined by '; ', what was found first
        (:func:`~dashboards.report.evidence_text.evidence_line`).
        """
        run_id = self._run_id("health")
        rows = self.frame(
            """
            SELECT scope, node, gpu_uuid, state, drain_candidate, first_evidence_ts, last_evidence_ts,
                   trend_start_ts, warning_ts, failure_ts, lead_seconds / 3600.0 AS lead_hours,
                   CAST(evidence AS VARCHAR) AS evidence
            FROM health WHERE run_id = ?
            ORDER BY CASE state WHEN 'drain' THEN 0 WHEN 'warn' THEN 1 WHEN 'watch' THEN 2 ELSE 3 END, scope DESC, node,
                     gpu_uuid
            """,
            [run_id],
        )
        return rows.with_columns(pl.col("evidence").map_elements(evidence_line, return_dtype=pl.String))

    def fragmentation_by_node(self) -> pl.DataFrame:
        """Per node over the window: ``node, gpu_model, stranded_ge_hours, avg_free_ge, why, why_share``.

        ``why`` is the reason that holds most of the node's stranded GE-hours (with nothing stranded:
        the reason of most of its free GE-hours), ``why_share`` the share of the node's stranded
        GE-hours it holds (NULL when nothing was stranded). No rows: the run found no free capacity.
        """
        run_id = self._run_id("fragmentation")
        return self.frame(
            """
            WITH per_reason AS (
                SELECT node, reason, sum(stranded_ge_hours) AS stranded,
                       sum(free_ge * epoch(bucket_end - bucket_start) / 3600.0) AS free_ge_hours
                FROM fragmentation WHERE run_id = $run GROUP BY node, reason
            ),
            why AS (
                SELECT node, arg_max(reason, (stranded, free_ge_hours, reason)) AS why,
                       max(stranded) / nullif(sum(stranded), 0) AS why_share
                FROM per_reason GROUP BY node
            )
            SELECT f.node, any_value(f.gpu_model) AS gpu_model, sum(f.stranded_ge_hours) AS stranded_ge_hours,
                   avg(f.free_ge) AS avg_free_ge, any_value(w.why) AS why, any_value(w.why_share) AS why_share
            FROM fragmentation f JOIN why w USING (node)
            WHERE f.run_id = $run
            GROUP BY f.node ORDER BY stranded_ge_hours DESC, f.node
            """,
            {"run": run_id},
        )

    # -- recommendations ----------------------------------------------------------------------------------

    def mig_layout(self) -> LayoutRun | None:
        """The fleet's MIG layout plan of the newest recommendation run, decided over the whole store (never
        over a scoped view of it); a scoped reader shows its tenants' part of it."""
        self.require("recommendations")
        if self._layout_view is None:
            with self._cursor() as cur:
                return layout_from_store(cur)
        with open_store(self.db_path) as fleet:
            run = layout_from_store(fleet)
        return None if run is None else self._layout_view(run)

    def placement_worse(self) -> pl.DataFrame:
        """Workload x level rows of the run shown spread over more domains than needed, most GE-hours affected first."""
        run_id = self._run_id("placement")
        return self.frame(
            """
            SELECT tenant, namespace, workload_kind, workload, gpu_model, level, pods, devices, nodes,
                   domains_spanned, min_domains, distance_score, ge_hours, ge_hours_affected, reason
            FROM placement WHERE run_id = ? AND placed_worse
            ORDER BY ge_hours_affected DESC, tenant, workload, level
            """,
            [run_id],
        )

    def placement_stranded(self) -> pl.DataFrame:
        """Per topology domain of the run shown: free GPUs, those stranded by topology, and why."""
        run_id = self._run_id("topology_stranded")
        return self.frame(
            """
            SELECT level, domain, gpu_model, free_gpus, stranded_gpus, parent, parent_free_gpus,
                   smallest_shape_gpus, measured_at, reason
            FROM topology_stranded WHERE run_id = ?
            ORDER BY stranded_gpus DESC, level, domain
            """,
            [run_id],
        )

    def recommendations(self) -> pl.DataFrame:
        """Recommendations of the newest ``gpulens recommend`` run, workloads first, reasons joined by '; '.

        Columns: ``scope`` (workload, quota, mig_conversion), ``tenant, target_kind, target_namespace,
        target_name, flavor, resource, gpu_model, current_profile, recommended_profile, current_value,
        recommended_value, next_value, action, confidence, confidence_label, history_days, reasons,
        evidence`` (JSON text), and for reading: ``target`` (kind namespace/name resource) and ``change``
        (``current → recommended`` profile, or value where the next apply is step-limited).
        """
        self.require("recommendations")
        return _readable_recommendations(self.frame(
            """
            SELECT scope, tenant, target_kind, target_namespace, target_name, flavor, resource, gpu_model,
                   current_profile, recommended_profile, current_value, recommended_value, next_value, action,
                   confidence, confidence_label, history_days, array_to_string(reasons, '; ') AS reasons,
                   CAST(evidence AS VARCHAR) AS evidence
            FROM recommendations
            WHERE run_id = (SELECT run_id FROM recommendations ORDER BY generated_at DESC LIMIT 1)
            ORDER BY CASE scope WHEN 'workload' THEN 0 WHEN 'mig_conversion' THEN 1 ELSE 2 END,
                     CASE WHEN action IN ('keep', 'hold', 'insufficient_data') THEN 1 ELSE 0 END,
                     tenant, target_namespace, target_name, resource
            """
        ))

    def quota_plan(self) -> pl.DataFrame:
        """Rows of the newest ``gpulens plan`` run: per queue, flavor and resource, current vs planned and why."""
        self.require("quota_plan")
        plan = self.frame(
            """
            SELECT run_id, generated_at, window_start, window_end, cluster_queue, tenant, flavor, resource,
                   current_quota, planned_quota, target_quota, capacity, physical_capacity, drained, reserve,
                   demand_p50, demand_p95, demand_ask, pending_share, weight, binding_constraint, relax_gain,
                   explanation, conflict
            FROM quota_plan
            WHERE run_id = (SELECT run_id FROM quota_plan ORDER BY generated_at DESC, run_id LIMIT 1)
            ORDER BY flavor, resource, cluster_queue
            """
        )
        if plan.height == 0:
            raise AnalysisMissing("quota_plan", self.db_path)
        return plan

    def workload_series(self, namespace: str, kind: str, name: str, bucket_seconds: int = 3600) -> pl.DataFrame:
        """Evidence over time for one workload: ``bucket, compute_ge`` (mean activity x GE summed over
        its devices), ``held_ge`` and ``memory_bytes`` (mean, summed over its devices)."""
        self.require_store()
        return self.frame(
            """
            WITH held AS (
                SELECT a.ts, a.device_id, d.gpu_equivalents AS ge, s.activity_ratio, s.memory_used_bytes
                FROM allocations a
                JOIN devices d USING (device_id)
                LEFT JOIN device_samples s ON s.device_id = a.device_id AND s.ts = a.ts
                WHERE a.namespace = ? AND coalesce(a.workload_kind, 'Pod') = ? AND coalesce(a.workload_name, a.pod) = ?
            ), per_ts AS (
                SELECT ts, sum(activity_ratio * ge) AS compute_ge, sum(ge) AS held_ge,
                       sum(memory_used_bytes) AS memory_bytes
                FROM held GROUP BY ts
            )
            SELECT time_bucket(to_seconds(?), ts) AS bucket, avg(compute_ge) AS compute_ge,
                   avg(held_ge) AS held_ge, avg(memory_bytes) AS memory_bytes
            FROM per_ts GROUP BY bucket ORDER BY bucket
            """,
            [namespace, kind, name, bucket_seconds],
        )


def _shown(value: pl.Expr) -> pl.Expr:
    """A number as text without a needless '.0'; null as an en dash."""
    return value.map_elements(lambda v: f"{v:g}", return_dtype=pl.String).fill_null("–")


def _readable_recommendations(recs: pl.DataFrame) -> pl.DataFrame:
    """Add ``target`` and ``change`` columns to recommendation rows."""
    value = _shown(pl.col("current_value")) + " → " + _shown(pl.coalesce(pl.col("next_value"), pl.col("recommended_value")))
    profile = pl.col("current_profile").fill_null("–") + " → " + pl.col("recommended_profile").fill_null("–")
    return recs.with_columns(
        target=pl.concat_str(
            [pl.col("target_kind"), pl.lit(" "), pl.col("target_namespace"),
             pl.when(pl.col("target_namespace") == "").then(pl.lit("")).otherwise(pl.lit("/")), pl.col("target_name")]
        ) + pl.when(pl.col("resource") == "").then(pl.lit("")).otherwise(pl.lit(" ") + pl.col("resource")),
        change=pl.when(pl.col("recommended_profile").is_not_null()).then(profile).otherwise(value),
    )
