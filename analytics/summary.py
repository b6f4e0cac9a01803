"""The headline numbers of one analysis run, read back from its result rows, and their text form."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import duckdb

from analytics.chargeback import FleetCost, device_state_of
from analytics.prices import PriceBook
from analytics.queue_use import QueueUse
from gpulens.core.states import DeviceState, HealthState

STATES = tuple(DeviceState)


@dataclass(frozen=True)
class TenantIdle:
    tenant: str
    idle_ge_hours: float
    idle_cost_usd: float | None
    """None: its idle GE-hours are all on unpriced models."""
    allocated_ge_hours: float
    idle_memory_gib_hours: float
    """Memory held while compute was idle (GiB x hours)."""


@dataclass(frozen=True)
class TenantRisk:
    tenant: str
    score: float
    top_term: str


@dataclass(frozen=True)
class DrainCandidate:
    """A GPU to keep new work off: ``drain`` (hard evidence) or ``watch`` (an early-warning trend)."""

    node: str
    gpu_uuid: str
    evidence: str
    state: str = "drain"
    trend_start: datetime | None = None
    """When the first early-warning trend began (None: no trend)."""
    warning_ts: datetime | None = None
    lead_seconds: float | None = None
    """How long before the hard failure the warning came (None: no failure after a warning in the window)."""

    def timeline(self) -> str:
        """``trend since ..., warned ..., 4.6 h before the failure`` (empty without a trend)."""
        if self.trend_start is None:
            return ""
        out = f"trend since {self.trend_start:%m-%d %H:%M}"
        if self.warning_ts is not None:
            out += f", warned {self.warning_ts:%m-%d %H:%M}"
        if self.lead_seconds is not None:
            out += f", {self.lead_seconds / 3600:.1f} h before the failure"
        elif self.state == "watch":
            out += ", not failed (yet)"
        return out


@dataclass(frozen=True)
class AnalysisSummary:
    """What ``gpulens analyze`` prints; also stored as JSON in ``analysis_runs.summary``."""

    run_id: str
    window_start: datetime
    window_end: datetime
    bucket_seconds: int
    sample_interval_seconds: float
    fact_source: str
    ge_hours_by_state: dict[str, float]
    cost_usd_by_state: dict[str, float]
    idle_by_tenant: tuple[TenantIdle, ...]
    stranded_ge_hours: float
    top_risk_tenants: tuple[TenantRisk, ...]
    drain_candidates: tuple[DrainCandidate, ...]
    warn_gpus: int
    fleet_cost_usd: Decimal
    """Fleet capacity x price (contracted, else list), exact."""
    chargeback_total_usd: Decimal
    """Sum of BilledCost over the run's chargeback lines."""
    phase_seconds: dict[str, float] = field(default_factory=dict)
    """Where the run's time went (the dict is filled while the run commits)."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Result table -> why this run did not compute it (e.g. no device samples in a Kueue-only store)."""
    queues: tuple[QueueUse, ...] = ()
    """Quota use per queue (filled when device analyses were skipped)."""
    price_lines: tuple[str, ...] = ()
    """The price book as the run used it: one line per model (price and source, or unpriced)."""
    unpriced_ge_hours: dict[str, float] = field(default_factory=dict)
    """GE-hours of models the book does not price (their money is not known, and not in any total)."""
    unpriced_ge_hours_by_state: dict[str, float] = field(default_factory=dict)
    idle_committed_usd: Decimal | None = None
    """Allocated-idle cost bought under a commitment (already paid); None: no line has commitment data."""
    idle_uncommitted_usd: Decimal | None = None
    """Allocated-idle cost of lines with commitment data that is on demand."""
    idle_unknown_commitment_usd: Decimal = Decimal(0)
    """Allocated-idle cost of lines without commitment data."""
    days_reused: int = 0
    """Days of the window whose stored part this run reused."""
    days_computed: dict[str, str] = field(default_factory=dict)
    """Day (ISO date; with node ranges, and the range) -> why this run computed its part (first analysed, its
    facts changed, a parameter...)."""
    node_ranges: int = 1
    """Node ranges per day of the parts the run used (1: whole days); reused and computed count parts."""

    @property
    def capacity_ge_hours(self) -> float:
        return sum(self.ge_hours_by_state.values())

    @property
    def reconciled(self) -> bool:
        return self.chargeback_total_usd == self.fleet_cost_usd.quantize(Decimal("0.01"))

    def as_json(self) -> dict[str, object]:
        data = asdict(self)
        data["fleet_cost_usd"] = str(self.fleet_cost_usd)
        data["chargeback_total_usd"] = str(self.chargeback_total_usd)
        data["window_start"] = self.window_start.isoformat()
        data["window_end"] = self.window_end.isoformat()
        data["reconciled"] = self.reconciled
        for key in ("idle_committed_usd", "idle_uncommitted_usd", "idle_unknown_commitment_usd"):
            data[key] = None if data[key] is None else str(data[key])
        return data

    def render(self) -> str:
        if self.skipped:
            return "\n".join(self._render_queues_only())
        cap = self.capacity_ge_hours or 1.0
        lines = [
            f"gpulens analysis {self.run_id}: {self.window_start:%Y-%m-%d %H:%M} .. {self.window_end:%Y-%m-%d %H:%M} UTC"
            f" ({self.bucket_seconds // 60} min buckets, samples every {self.sample_interval_seconds:g} s,"
            f" facts from {self.fact_source})",
            f"capacity {self.capacity_ge_hours:,.1f} GE-hours (% = share of capacity GE-hours; $ = the chargeback's"
            " BilledCost, the cents of the CSV exports):",
        ]
        for state in STATES:
            ge = self.ge_hours_by_state.get(state, 0.0)
            cost = self.cost_usd_by_state.get(state)
            unpriced = self.unpriced_ge_hours_by_state.get(state)
            if cost is None and unpriced:  # only unpriced models: no money known
                money = f"{'unpriced':>13}"
            else:
                money = f"${cost or 0.0:>12,.2f}" + (f" + {unpriced:,.1f} GE-h unpriced" if unpriced else "")
            lines.append(f"  {state:<22} {ge:>12,.1f} GE-h {100 * ge / cap:5.1f}%  {money}")
        lines += self._render_prices()
        lines.append("allocated-idle by tenant (GE-hours, $, memory held while idle):")
        if not self.idle_by_tenant:
            lines.append("  (none)")
        for t in self.idle_by_tenant:
            pct = 100 * t.idle_ge_hours / t.allocated_ge_hours if t.allocated_ge_hours else 0.0
            money = f"{'unpriced':>11}" if t.idle_cost_usd is None else f"${t.idle_cost_usd:>10,.2f}"
            lines.append(
                f"  {_safe(t.tenant):<24} {t.idle_ge_hours:>10,.1f} GE-h ({pct:4.1f}% of its allocation)"
                f"  {money}  {t.idle_memory_gib_hours:>10,.1f} GiB-h"
            )
        lines.append(f"stranded capacity (free, but no pending shape fits): {self.stranded_ge_hours:,.1f} GE-hours")
        lines.append("highest isolation risk (tenant, score 0-100, largest term):")
        if not self.top_risk_tenants:
            lines.append("  (none)")
        for r in self.top_risk_tenants:
            lines.append(f"  {_safe(r.tenant):<24} {r.score:5.1f}  {r.top_term}")
        watch = sum(1 for d in self.drain_candidates if d.state == "watch")
        leads = sorted(d.lead_seconds / 3600 for d in self.drain_candidates if d.lead_seconds is not None)
        lines.append(
            f"drain candidates: {len(self.drain_candidates)} GPU(s) ({watch} on early warning only);"
            f" {self.warn_gpus} GPU(s) warn"
        )
        if leads:
            lines.append(
                f"early warnings: {len(leads)} GPU(s) warned before they failed, lead "
                + ", ".join(f"{h:.1f} h" for h in leads)
            )
        for d in self.drain_candidates[:10]:
            when = d.timeline()
            lines.append(f"  {_safe(d.node)} {d.gpu_uuid} [{d.state}]{' ' + when if when else ''}: {d.evidence}")
        if len(self.drain_candidates) > 10:
            lines.append(f"  ... {len(self.drain_candidates) - 10} more in the health table")
        lines += self._render_days()
        verdict = "reconciled" if self.reconciled else "NOT RECONCILED"
        lines.append(
            f"chargeback ${self.chargeback_total_usd:,.2f} vs fleet capacity x price"
            f" ${self.fleet_cost_usd.quantize(Decimal('0.01')):,.2f}: {verdict}"
        )
        return "\n".join(lines)


    def _render_prices(self) -> list[str]:
        """The book the money above used, the unpriced models, and idle cost by commitment."""
        lines = ["prices (USD per whole-GPU hour; $ above is what is paid):"]
        lines += [f"  {line}" for line in self.price_lines]
        for model, ge in sorted(self.unpriced_ge_hours.items()):
            lines.append(f"  unpriced: {model or 'unknown model'} {ge:,.1f} GE-hours are in no $ figure or total")
        if self.idle_committed_usd is None and not self.idle_unknown_commitment_usd:
            lines.append("allocated-idle cost by commitment: no priced allocated-idle cost in the window")
        elif self.idle_committed_usd is None:
            lines.append("allocated-idle cost by commitment: not known (no commitment data: gpulens prices import-focus)")
        else:
            unknown = (f", ${self.idle_unknown_commitment_usd:,.2f} without commitment data"
                       if self.idle_unknown_commitment_usd else "")
            lines.append(f"allocated-idle cost: ${self.idle_committed_usd:,.2f} committed, already paid; "
                         f"${self.idle_uncommitted_usd or 0:,.2f} on demand{unknown}")
        return lines

    def _render_days(self) -> list[str]:
        if not self.days_computed and not self.days_reused:
            return []
        total = self.days_reused + len(self.days_computed)
        if self.node_ranges > 1:
            out = [f"days: {total // self.node_ranges} in the window, each in {self.node_ranges} node ranges: "
                   f"{total} parts, {self.days_reused} reused, {len(self.days_computed)} computed"]
        else:
            out = [f"days: {total} in the window, {self.days_reused} reused, {len(self.days_computed)} computed"]
        first = sorted(d for d, why in self.days_computed.items() if why == "first analysed")
        if first:
            out[0] += f" ({len(first)} first analysed)"
        out += [f"  {day}: computed again: {why}" for day, why in sorted(self.days_computed.items())
                if why != "first analysed"]
        return out

    def _render_queues_only(self) -> list[str]:
        lines = [
            f"gpulens analysis {self.run_id}: {self.window_start:%Y-%m-%d %H:%M} .. {self.window_end:%Y-%m-%d %H:%M} UTC"
            f" ({self.bucket_seconds // 60} min buckets, facts from {self.fact_source})",
            "skipped (not measured, not zero):",
        ]
        reasons: dict[str, list[str]] = {}
        for table, why in self.skipped.items():
            reasons.setdefault(why, []).append(table)
        lines += [f"  {', '.join(tables)}: {why}" for why, tables in reasons.items()]
        lines.append("quota use per queue (nominal, mean and peak in use, buckets with work waiting):")
        if not self.queues:
            lines.append("  (none)")
        for q in self.queues:
            flavor = f" {_safe(q.flavor)}" if q.flavor else ""
            mean = "not recorded" if q.usage_mean is None else f"mean {q.usage_mean:,.1f}"
            peak = "" if q.usage_peak is None else f", peak {q.usage_peak:,.0f}"
            nominal = "?" if q.nominal is None else f"{q.nominal:g}"
            waited = f"{q.pending_buckets} of {q.buckets} buckets"
            most = "" if q.pending_peak is None else f" (up to {q.pending_peak:g} waiting)"
            lines.append(f"  {q.object_kind} {_safe(q.name)}{flavor} {q.resource}: quota {nominal}, {mean}{peak};"
                         f" work waited in {waited}{most}")
        lines.append("quota recommendations: run `gpulens recommend` (it needs no device samples)")
        return lines


def _safe(text: str) -> str:
    """Tenant-controlled text printed on a terminal: no control characters."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def build_summary(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    window_start: datetime,
    window_end: datetime,
    bucket_seconds: int,
    interval_s: float,
    fact_source: str,
    fleet: FleetCost,
    top: int = 10,
    phase_seconds: dict[str, float] | None = None,
    prices: PriceBook | None = None,
    days_reused: int = 0,
    days_computed: dict[str, str] | None = None,
    node_ranges: int = 1,
) -> AnalysisSummary:
    """Read the run's rows back into headline numbers (``prices``: the book the run used, named per model)."""
    ge_by_state = con.execute(
        "SELECT state, sum(ge_hours) FROM idle_capacity WHERE run_id = ? GROUP BY state", [run_id]
    ).fetchall()
    cost_by_state: dict[str, Decimal] = {}
    for cost_state, billed in con.execute(
        'SELECT x_CostState, sum("BilledCost") FROM chargeback WHERE run_id = ? GROUP BY ALL', [run_id]
    ).fetchall():  # money is the chargeback's cents (rounded once, from the fleet total), never re-rounded here
        state = device_state_of(cost_state).value
        cost_by_state[state] = cost_by_state.get(state, Decimal(0)) + billed
    idle = con.execute(
        """
        WITH billed AS (
            SELECT x_Tenant AS tenant, sum("BilledCost") AS idle_cost FROM chargeback
            WHERE run_id = $run AND x_CostState = 'idle' AND x_Tenant IS NOT NULL GROUP BY ALL
        )
        SELECT tenant,
               coalesce(sum(ge_hours) FILTER (WHERE state = $idle), 0) AS idle_ge,
               CASE WHEN any_value(b.idle_cost) IS NULL AND sum(ge_hours) FILTER (WHERE state = $idle) > 0
                    THEN NULL ELSE coalesce(any_value(b.idle_cost), 0) END,  -- idle only on unpriced models
               sum(ge_hours),
               coalesce(sum(memory_byte_hours) FILTER (WHERE state = $idle), 0) / 1073741824.0
        FROM idle_capacity LEFT JOIN billed b USING (tenant) WHERE run_id = $run AND tenant IS NOT NULL
        GROUP BY tenant ORDER BY idle_ge DESC, tenant LIMIT $top
        """,
        {"run": run_id, "top": top, "idle": DeviceState.ALLOCATED_IDLE.value},
    ).fetchall()
    stranded = con.execute(
        "SELECT coalesce(sum(stranded_ge_hours), 0) FROM fragmentation WHERE run_id = ?", [run_id]
    ).fetchone()
    risks = con.execute(
        """
        SELECT tenant, score, terms FROM isolation_risk WHERE run_id = ? AND scope = 'tenant'
        ORDER BY score DESC, tenant LIMIT ?
        """,
        [run_id, min(top, 5)],
    ).fetchall()
    drains = con.execute(
        """
        SELECT node, gpu_uuid, evidence, state, trend_start_ts, warning_ts, lead_seconds FROM health
        WHERE run_id = ? AND scope = 'gpu' AND drain_candidate ORDER BY node, gpu_uuid
        """,
        [run_id],
    ).fetchall()
    warn = con.execute(
        "SELECT count(*) FROM health WHERE run_id = ? AND scope = 'gpu' AND state = ?", [run_id, HealthState.WARN.value]
    ).fetchone()
    billed = con.execute(
        'SELECT coalesce(sum("BilledCost"), 0) FROM chargeback WHERE run_id = ?', [run_id]
    ).fetchone()
    return AnalysisSummary(
        run_id=run_id,
        window_start=window_start,
        window_end=window_end,
        bucket_seconds=bucket_seconds,
        sample_interval_seconds=interval_s,
        fact_source=fact_source,
        ge_hours_by_state={s: float(g) for s, g in ge_by_state},
        cost_usd_by_state={s: float(c) for s, c in cost_by_state.items()},
        idle_by_tenant=tuple(TenantIdle(t, float(i), None if c is None else float(c), float(a), float(m))
                             for t, i, c, a, m in idle),
        stranded_ge_hours=float(stranded[0]) if stranded else 0.0,
        top_risk_tenants=tuple(TenantRisk(t, float(s), _top_term(terms)) for t, s, terms in risks),
        drain_candidates=tuple(
            DrainCandidate(n, g, _drain_reasons(ev), state, trend, warned, None if lead is None else float(lead))
            for n, g, ev, state, trend, warned, lead in drains
        ),
        warn_gpus=int(warn[0]) if warn else 0,
        fleet_cost_usd=fleet.contracted_usd,
        chargeback_total_usd=Decimal(billed[0]) if billed else Decimal(0),
        phase_seconds=phase_seconds if phase_seconds is not None else {},
        **_price_facts(con, run_id, prices),
        days_reused=days_reused,
        days_computed=dict(days_computed or {}),
        node_ranges=node_ranges,
    )


def _price_facts(con: duckdb.DuckDBPyConnection, run_id: str, prices: PriceBook | None) -> dict[str, Any]:
    """The run's price lines, unpriced GE-hours per model, and its idle cost split by commitment."""
    models = [str(r[0]) for r in con.execute(
        "SELECT DISTINCT gpu_model FROM idle_capacity WHERE run_id = ? AND gpu_model IS NOT NULL", [run_id]
    ).fetchall()]
    unpriced = con.execute(
        "SELECT coalesce(gpu_model, ''), state, sum(ge_hours) FROM idle_capacity WHERE run_id = ? AND cost_usd IS NULL "
        "GROUP BY ALL", [run_id]
    ).fetchall()
    by_model: dict[str, float] = {}
    by_state: dict[str, float] = {}
    for model, state, ge in unpriced:
        by_model[str(model)] = by_model.get(str(model), 0.0) + float(ge)
        by_state[str(state)] = by_state.get(str(state), 0.0) + float(ge)
    committed, uncommitted, unknown = con.execute(
        """SELECT sum("x_CommittedCost"), sum("BilledCost" - "x_CommittedCost"),
                  coalesce(sum("BilledCost") FILTER (WHERE "x_CommittedCost" IS NULL), 0)
           FROM chargeback WHERE run_id = ? AND x_CostState = 'idle'""", [run_id]
    ).fetchone() or (None, None, 0)
    return {
        "price_lines": (*prices.notes, *prices.lines(models)) if prices is not None else (),
        "unpriced_ge_hours": by_model,
        "unpriced_ge_hours_by_state": by_state,
        "idle_committed_usd": committed,
        "idle_uncommitted_usd": uncommitted,
        "idle_unknown_commitment_usd": Decimal(unknown),
    }


def _top_term(terms_json: str) -> str:
    import json

    terms = [t for t in json.loads(terms_json) if t["term"] != "cap"]
    if not terms:
        return ""
    t = max(terms, key=lambda x: x["points"])
    return f"{t['term']} +{t['points']:g}: {t['reason']}"


def _drain_reasons(evidence_json: str) -> str:
    import json

    return "; ".join(e["reason"] for e in json.loads(evidence_json) if e["severity"] in ("drain", "watch"))
