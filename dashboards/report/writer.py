"""``write_report``: the self-contained HTML report plus its CSV and Parquet files, from a store.

The report reads the store read-only and shows one analysis run (``run_id``, default the newest):
its window, bucket, threshold and price source are in the header, with a note when its parameters
are not the defaults. Each section stands alone: a section whose analysis has not run yet shows which
command to run, the others still render. Every money figure comes from the run's chargeback (FOCUS
``BilledCost``, cents reconciled by largest remainder), so all of them add up to the fleet total.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from analytics.chargeback import TENANT_COST_STATES, UNALLOCATED, UNKNOWN
from analytics.csv_cells import safe_frame
from analytics.focus_formats import chosen
from analytics.tenant_energy import DEFAULT_GRID_GCO2_PER_KWH
from dashboards.report import html_parts as h
from dashboards.report import svg
from dashboards.report.data import AnalysisMissing, StoreReader
from dashboards.report.health_timeline import section as health_timeline_section
from dashboards.report.mig_layout_section import mig_layout_section
from dashboards.report.placement_section import placement_section
from dashboards.report.scope import TenantDirectory, TenantScope, scope_reader
from gpulens.core.errors import UserError
from gpulens.core.states import HealthState

INDEX = "index.html"
TENANTS_CSV = "tenants.csv"
CHART_POINTS = 400
"""Most x positions in a time chart; longer windows average neighbouring buckets."""
MAX_ROWS = 25
"""Longest list shown in a chart or table; the CSV files hold every row."""
IDLE_RULE = (
    "Idle is decided per sample, not per bucket mean: each sample's held time is idle or active by its own "
    "activity reading against the threshold, weighted by the sample interval; buckets only add up. A sample "
    "without a finite activity reading is unmeasured, never idle or active."
)
"""How held time is split into idle and active, in the words the docs and the dashboard use."""


@dataclass
class _Build:
    """What the sections produce while the report is assembled."""

    reader: StoreReader
    out_dir: Path
    grid_gco2_per_kwh: float = DEFAULT_GRID_GCO2_PER_KWH
    """Grid carbon intensity the CO2e figures use (gCO2e/kWh)."""
    files: list[tuple[str, str]] = field(default_factory=list)
    """(file name, description) of every data file written."""


def write_report(
    db_path: str | Path, out_dir: str | Path, *, now: datetime | None = None, run_id: str | None = None,
    scope: TenantScope | None = None, directory: TenantDirectory | None = None,
    grid_gco2_per_kwh: float = DEFAULT_GRID_GCO2_PER_KWH,
) -> Path:
    """Write ``index.html`` (charts inline, no network needed), the FOCUS chargeback as CSV and Parquet,
    and a per-tenant CSV into ``out_dir`` for analysis run ``run_id`` (default the newest); return the
    path of ``index.html``.

    With a ``scope`` of some tenants, every section and file shows only theirs (see ``report.scope``).
    Raises ``UserError`` when the store cannot be read, ``run_id`` is not a run of the store or
    ``out_dir`` cannot be written.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    store = StoreReader.open(db_path, run_id)
    reader = store
    try:
        store.require_store()
        run_line, run_note = run_header_line(store)
        reader = scope_reader(store, scope or TenantScope.everything(), directory)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create {out}: {exc.strerror or exc}") from exc
        build = _Build(reader, out, grid_gco2_per_kwh)
        sections = [(anchor, title, _guarded_section(anchor, title, fn, build)) for anchor, title, fn in _SECTIONS]
        sections.append(("files", "Data files", _files_section(build)))
        overview = reader.overview().row(0, named=True)
        generated = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
        meta = (
            f"Store {Path(db_path).name} · {overview['nodes']} nodes, {overview['gpus']} GPUs, "
            f"{overview['devices']} devices · samples {h.fmt_time(overview['first_sample'])} to "
            f"{h.fmt_time(overview['last_sample'])} · generated {generated}"
        )
        page_title = "gpulens report: GPU capacity, idle cost, isolation risk"
        if scope is not None and scope.tenants is not None:
            page_title = f"gpulens report for {', '.join(sorted(scope.tenants))}: GPU capacity, idle cost, isolation risk"
            meta = f"Only this tenant's devices, costs and findings; fleet figures are its share · {meta}"
        document = h.page(
            page_title,
            meta,
            run_line,
            run_note,
            [(anchor, title) for anchor, title, _ in sections],
            "".join(body for _, _, body in sections),
        )
        index = out / INDEX
        _write_text(index, document)
        return index
    finally:
        if reader is not store:
            reader.close()
        store.close()


def run_header_line(reader: StoreReader) -> tuple[str, str]:
    """The header's line naming the run shown, and a note when its parameters are not the defaults."""
    try:
        run = reader.describe_run()
    except AnalysisMissing:
        if reader.run_id is not None:
            raise
        return "No analysis run yet: run `gpulens analyze` first.", ""
    return run.header() + ".", run.non_default_note()


def _write_text(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _guarded(fn: Callable[[_Build], str], build: _Build) -> str:
    """Render one section body; a missing analysis becomes a notice naming the command to run."""
    try:
        return fn(build)
    except AnalysisMissing as exc:
        return h.notice(f"{exc}.")


# -- sections -------------------------------------------------------------------------------------------


def _summary(b: _Build) -> str:
    run = b.reader.describe_run()
    split = {r["state"]: r for r in b.reader.cost_split().iter_rows(named=True)}
    total = sum(r["billed_usd"] for r in split.values())
    idle = split.get("idle", {}).get("billed_usd", 0.0)
    unallocated = sum(split.get(s, {}).get("billed_usd", 0.0) for s in ("unallocated", "shared-unallocated"))
    idle_ge_h = split.get("idle", {}).get("ge_hours", 0.0)
    held_ge_h = sum(split.get(s, {}).get("ge_hours", 0.0) for s in ("active", "idle", "unmeasured"))
    cards = h.cards([
        ("fleet GPU cost (FOCUS BilledCost)", h.fmt_usd(total)),
        ("allocated but idle", h.fmt_usd(idle)),
        ("unallocated", h.fmt_usd(unallocated)),
        ("idle GE-hours", h.fmt_number(idle_ge_h, 1)),
        ("idle, share of held GE-hours", h.fmt_percent(idle_ge_h / held_ge_h if held_ge_h else None)),
        ("idle + unallocated, share of fleet cost", h.fmt_percent((idle + unallocated) / total if total else None)),
    ])
    intro = (
        f"Analysis window {h.fmt_time(run.window_start)} to {h.fmt_time(run.window_end)} (run {run.run_id}). "
        + IDLE_RULE
    )
    return h.section("summary", "Summary", cards, intro=intro)


def _capacity(b: _Build) -> str:
    frame = b.reader.capacity_states(max_points=CHART_POINTS)
    states = [c for c in frame.columns if c != "bucket" and frame[c].sum() > 0]
    xs = [t.timestamp() for t in frame["bucket"].to_list()]
    labels = [t.strftime("%m-%d %H:%M") for t in frame["bucket"].to_list()]
    series = [svg.Series(s, tuple(frame[s].to_list()), svg.colour_for(s, i)) for i, s in enumerate(states)]
    chart = svg.stacked_area_chart(
        "Fleet capacity by state (GPU-equivalents)", xs, series, x_labels=labels, unit="GPU-equivalents"
    )
    intro = (
        "Average GPU-equivalents (1 per GPU, g/7 per MIG slice) in each state per time bucket. " + IDLE_RULE
    )
    return h.section("capacity", "Capacity over time", chart, intro=intro)


def _idle_by_tenant(b: _Build) -> str:
    usage = b.reader.tenant_usage().head(MAX_ROWS)
    names = usage["tenant"].to_list()
    series = [
        svg.Series("idle", tuple(usage["idle_ge_hours"].to_list()), svg.colour_for("idle", 0)),
        svg.Series("unmeasured", tuple(usage["unmeasured_ge_hours"].to_list()), svg.colour_for("unmeasured", 1)),
        svg.Series("active", tuple(usage["active_ge_hours"].to_list()), svg.colour_for("active", 2)),
    ]
    chart = svg.stacked_bar_chart("GE-hours held per tenant, idle first", names, series, unit="GE-h")
    table = h.table(usage, [
        h.Col("tenant", "tenant", h.text, numeric=False),
        h.Col("idle_ge_hours", "idle GE-h"),
        h.Col("active_ge_hours", "active GE-h"),
        h.Col("unmeasured_ge_hours", "unmeasured GE-h"),
        h.Col("idle_share", "idle, share of its held GE-h", h.fmt_percent),
        h.Col("idle_cost_usd", "idle cost (billed)", h.fmt_usd),
        h.Col("held_cost_usd", "held cost (billed)", h.fmt_usd),
    ])
    intro = (
        "GPU-equivalent hours (GE-hours) each tenant held, split by what it did with them, most idle first. "
        + IDLE_RULE + " Costs are the chargeback's billed cents, as in the cost split."
    )
    return h.section("idle", "Idle capacity by tenant", chart + table + _reconciliation(b), intro=intro)


def _reconciliation(b: _Build) -> str:
    """One line: tenants' held cost + unallocated + no data = the fleet total, from the same chargeback cents."""
    split = {r["state"]: r["billed_usd"] for r in b.reader.cost_split().iter_rows(named=True)}
    cents = {state: round(usd * 100) for state, usd in split.items()}
    held = sum(cents.get(s, 0) for s in ("active", "idle", "unmeasured"))
    shared = cents.get("shared-unallocated", 0)
    unallocated = cents.get("unallocated", 0)
    unknown = cents.get("unknown", 0)
    total = sum(cents.values())
    parts = [f"held by tenants {h.fmt_usd(held / 100)}"]
    if shared:
        parts.append(f"unallocated shared between tenants {h.fmt_usd(shared / 100)}")
    if unallocated:
        parts.append(f"unallocated {h.fmt_usd(unallocated / 100)}")
    if unknown:
        parts.append(f"no data {h.fmt_usd(unknown / 100)}")
    return f'<p class="note">{h.esc(" + ".join(parts) + f" = fleet total {h.fmt_usd(total / 100)} (FOCUS BilledCost)")}</p>'


def _cost_split(b: _Build) -> str:
    split = b.reader.cost_split()
    by_account = b.reader.chargeback_by_account()
    states = split["state"].to_list()
    totals = svg.stacked_bar_chart(
        "Fleet cost by state (USD)", ["fleet"],
        [svg.Series(s, (v,), svg.colour_for(s, i)) for i, (s, v) in enumerate(zip(states, split["billed_usd"], strict=True))],
        unit="USD",
    )
    pivot = (
        by_account.pivot(on="state", index="account", values="billed_usd", aggregate_function="sum")
        .fill_null(0.0)
    )
    present = [s for s in states if s in pivot.columns]
    pivot = pivot.with_columns(pl.sum_horizontal(present).alias("total")).sort("total", descending=True).head(MAX_ROWS)
    per_account = svg.stacked_bar_chart(
        "Cost per account and state (USD)", pivot["account"].to_list(),
        [svg.Series(s, tuple(pivot[s].to_list()), svg.colour_for(s, i)) for i, s in enumerate(present)],
        unit="USD",
    )
    table = h.table(pivot, [h.Col("account", "account", h.text, numeric=False),
                            *[h.Col(s, s, h.fmt_usd) for s in present], h.Col("total", "total", h.fmt_usd)])
    intro = (
        "Chargeback (FOCUS BilledCost) over the window: what tenants used actively, what they held idle, "
        "and capacity nobody held (its own account, __unallocated__)."
    )
    return h.section("cost", "Cost split: active, idle, unallocated", totals + per_account + table, intro=intro)


def _chargeback_index(b: _Build) -> str:
    """Per tenant: what it is charged, its share of the fleet cost, its energy and CO2e; the money no tenant
    is charged (unallocated, no data) on its own rows, and the totals."""
    index = b.reader.chargeback_index(b.grid_gco2_per_kwh)
    measured = index["energy_kwh"].drop_nulls()
    totals = pl.DataFrame([{
        "account": "total", "billed_usd": float(index["billed_usd"].sum() or 0.0),
        "share": 1.0 if index.height else None, "idle_usd": float(index["idle_usd"].sum() or 0.0),
        "shared_unallocated_usd": float(index["shared_unallocated_usd"].sum() or 0.0),
        "energy_kwh": float(measured.sum()) if measured.len() else None,
        "co2e_kg": float(index["co2e_kg"].drop_nulls().sum()) if measured.len() else None,
    }])
    rows = pl.concat([index, totals], how="diagonal_relaxed")
    table = h.table(rows, [
        h.Col("account", "tenant / account", h.text, numeric=False),
        h.Col("billed_usd", "charged (billed)", h.fmt_usd),
        h.Col("share", "share of fleet cost", h.fmt_percent),
        h.Col("idle_usd", "of which idle", h.fmt_usd),
        h.Col("shared_unallocated_usd", "its part of shared unallocated", h.fmt_usd),
        h.Col("energy_kwh", "energy (kWh)", lambda v: h.fmt_number(v, 1)),
        h.Col("energy_coverage", "energy measured, share of held time", h.fmt_percent),
        h.Col("co2e_kg", "CO2e (kg)", lambda v: h.fmt_number(v, 1)),
    ])
    total = float(index["billed_usd"].sum() or 0.0)
    nobody = float(index.filter(pl.col("account").is_in([UNALLOCATED, UNKNOWN]))["billed_usd"].sum() or 0.0)
    note = (f"Charged to no tenant (unallocated capacity and time without data): {h.fmt_usd(nobody)} = "
            f"{h.fmt_percent(nobody / total if total else None)} of the fleet cost {h.fmt_usd(total)}.")
    intro = (
        "Each tenant's chargeback over the window (FOCUS BilledCost; the cents add up to the fleet total), "
        "its energy from each GPU's energy counter (power x time only where a GPU has no counter; – where "
        "neither was read, never 0), shared by the GPU-equivalents held, and its CO2e at a grid intensity of "
        f"{b.grid_gco2_per_kwh:g} gCO2e/kWh (--grid-gco2-per-kwh). Energy totals add up the measured rows only."
    )
    workloads = b.reader.chargeback_by_workload(MAX_ROWS)
    by_workload = "" if workloads.is_empty() else "<h3>By namespace and workload</h3>" + h.table(workloads, [
        h.Col("tenant", "tenant", h.text, numeric=False),
        h.Col("namespace", "namespace", h.text, numeric=False),
        h.Col("workload_kind", "kind", h.text, numeric=False),
        h.Col("workload", "workload", h.text, numeric=False),
        h.Col("billed_usd", "charged (billed)", h.fmt_usd),
        h.Col("idle_usd", "of which idle", h.fmt_usd),
        h.Col("ge_hours", "GE-h", lambda v: h.fmt_number(v, 1)),
    ]) + f'<p class="note">The {MAX_ROWS} workloads charged most; every line is in chargeback_focus.csv.</p>'
    body = f'<p class="note">{h.esc(note)}</p>' + table + by_workload
    return h.section("chargeback", "Chargeback by tenant, namespace and workload", body, intro=intro)


RISK_TABLE_SUBJECTS = {"tenant": MAX_ROWS, "device": 5}
"""How many of the riskiest subjects list their terms in a table under the heat map."""


def _short_subject(subject: str) -> str:
    """``node/GPU-1234abcd-...`` -> ``node/GPU-1234abcd`` for chart labels (tables keep the full id)."""
    node, sep, gpu = subject.partition("/")
    return f"{node}/{gpu[:12]}" if sep and len(gpu) > 12 else subject


def _risk(b: _Build) -> str:
    parts = []
    for scope, title in (("tenant", "tenants"), ("device", "GPUs")):
        terms = b.reader.isolation_terms(scope)
        scores = b.reader.isolation_scores(scope).head(MAX_ROWS)
        subjects = scores["subject"].to_list()
        names = sorted(set(terms["term"].to_list()) - {"cap"})
        points = {(r["subject"], r["term"]): r["points"] for r in terms.iter_rows(named=True)}
        top = max([abs(p) for p in points.values()], default=0.0) or 1.0
        values = [[points.get((s, t), 0.0) / top for t in names] for s in subjects]
        text = [[h.fmt_number(points.get((s, t), 0.0), 0) for t in names] for s in subjects]
        labels = [_short_subject(s) for s in subjects]
        parts.append(svg.heat_map(f"Isolation-risk points by term, {title}", labels, names, values, cell_text=text))
        listed = subjects[: RISK_TABLE_SUBJECTS[scope]]
        parts.append(h.table(terms.filter(pl.col("subject").is_in(listed)), [
            h.Col("subject", "tenant" if scope == "tenant" else "node/GPU", h.text, numeric=False),
            h.Col("score", "score", lambda v: h.fmt_number(v, 0)),
            h.Col("term", "term", h.text, numeric=False),
            h.Col("points", "points", lambda v: h.fmt_number(v, 0)),
            h.Col("reason", "reason", h.text, numeric=False),
        ]))
        if len(subjects) > len(listed):
            parts.append(f'<p class="note">Terms of the {len(listed)} riskiest {h.esc(title)}; the heat map shows all.</p>')
    intro = "Score 0..100 is the sum of the points of its terms; each term says why it counts."
    return h.section("risk", "Isolation risk", "".join(parts), intro=intro)


QUIET_ACTIONS = ("keep", "hold", "insufficient_data")
"""Recommendation actions that change nothing."""
EVIDENCE_CHARTS = 3
"""Workload recommendations that get an evidence chart in the report."""


def _recommendations(b: _Build) -> str:
    recs = b.reader.recommendations()
    counts = recs.group_by("scope", "action").len().sort("scope", "action")
    scopes = sorted(set(counts["scope"].to_list()))
    actions = sorted(set(counts["action"].to_list()))
    lookup = {(r["scope"], r["action"]): r["len"] for r in counts.iter_rows(named=True)}
    parts = [svg.stacked_bar_chart(
        "Recommendations by kind and action", scopes,
        [svg.Series(a, tuple(float(lookup.get((sc, a), 0)) for sc in scopes), svg.PALETTE[i % len(svg.PALETTE)])
         for i, a in enumerate(actions)],
    )]
    movers = recs.filter((pl.col("scope") == "workload") & ~pl.col("action").is_in(QUIET_ACTIONS)).head(EVIDENCE_CHARTS)
    for r in movers.iter_rows(named=True):
        series = b.reader.workload_series(r["target_namespace"], r["target_kind"], r["target_name"])
        xs = [t.timestamp() for t in series["bucket"].to_list()]
        labels = [t.strftime("%m-%d %H:%M") for t in series["bucket"].to_list()]
        parts.append(svg.line_chart(
            f"Evidence: {r['target']} ({r['change']}): GPU-equivalents held vs used",
            xs,
            [svg.Series("held", tuple(series["held_ge"].fill_null(float("nan")).to_list()), svg.PALETTE[1]),
             svg.Series("used (activity x GE)", tuple(series["compute_ge"].fill_null(float("nan")).to_list()),
                        svg.PALETTE[0])],
            x_labels=labels, unit="GPU-equivalents", y_max=None,
        ))
    parts.append(h.table(recs, [
        h.Col("scope", "kind", h.text, numeric=False), h.Col("tenant", "tenant", h.text, numeric=False),
        h.Col("target", "target", h.text, numeric=False), h.Col("flavor", "Kueue flavor", h.text, numeric=False),
        h.Col("change", "change", h.text, numeric=False),
        h.Col("action", "action", h.text, numeric=False),
        h.Col("confidence_label", "confidence", h.text, numeric=False),
        h.Col("reasons", "why", h.text, numeric=False),
    ], limit=MAX_ROWS * 2))
    intro = (
        "What to change: MIG profiles for workloads, quotas per queue, MIG conversions; each with its "
        "confidence and reasons. Evidence charts compare what a workload held with what it used."
    )
    return h.section("recommendations", "Recommendations", "".join(parts), intro=intro)


def _health(b: _Build) -> str:
    health = b.reader.health()
    drain = health.filter(pl.col("drain_candidate"))
    parts = [h.cards([("drain candidates", str(drain.filter(pl.col("scope") == "gpu").height)),
                      ("GPUs warned", str(health.filter((pl.col("state") == HealthState.WARN.value) & (pl.col("scope") == "gpu")).height)),
                      ("GPUs ok", str(health.filter((pl.col("state") == HealthState.OK.value) & (pl.col("scope") == "gpu")).height))])]
    columns = [
        h.Col("scope", "scope", h.text, numeric=False), h.Col("node", "node", h.text, numeric=False),
        h.Col("gpu_uuid", "GPU", h.text, numeric=False), h.Col("state", "state", h.text, numeric=False),
        h.Col("last_evidence_ts", "last evidence", h.fmt_time, numeric=False),
        h.Col("evidence", "evidence", h.text, numeric=False),
    ]
    parts.append("<h3>Drain list</h3>")
    parts.append(h.table(drain, columns) if drain.height else "<p>No GPU needs draining.</p>")
    warn = health.filter(pl.col("state") == HealthState.WARN.value)
    if warn.height:
        parts.append("<h3>Warnings</h3>" + h.table(warn, columns, limit=MAX_ROWS))
    try:
        frag = b.reader.fragmentation_by_node()
    except AnalysisMissing as exc:
        parts.append(h.notice(f"{exc}."))
    else:
        parts.append("<h3>Stranded capacity (fragmentation)</h3>" + _stranded(frag))
    return h.section("health", "Health and drain list", "".join(parts))


def _stranded(frag: pl.DataFrame) -> str:
    """The stranded-capacity table, or the sentence saying that this run found nothing stranded."""
    if frag.height == 0:
        return "<p>Nothing stranded in this window: the run found no free capacity.</p>"
    stranded = float(frag["stranded_ge_hours"].sum())
    not_collected = any("not collected" in str(w) for w in frag["why"].to_list())
    lead = "" if stranded > 0 else (
        "<p>Pending demand was not collected (no Kueue metrics or pod inventory): free capacity is not called "
        "stranded, and not called unwanted either. Collect Kueue metrics or run `gpulens collect --kubernetes`.</p>"
        if not_collected else
        "<p>Nothing stranded in this window: free capacity was either not wanted (no pending demand) "
        "or fit a pending request shape.</p>"
    )
    return lead + h.table(frag.head(MAX_ROWS), [
        h.Col("node", "node", h.text, numeric=False), h.Col("gpu_model", "model", h.text, numeric=False),
        h.Col("stranded_ge_hours", "stranded GE-h"), h.Col("avg_free_ge", "avg free GE (buckets with free capacity)"),
        h.Col("why", "why (reason holding most of the node's stranded GE-h)", h.text, numeric=False),
        h.Col("why_share", "that reason, share of the node's stranded GE-h", h.fmt_percent),
    ])


def _quota_plan(b: _Build) -> str:
    plan = b.reader.quota_plan()
    r0 = plan.row(0, named=True)
    pools = plan.group_by("flavor", "resource", maintain_order=True).agg(
        pl.col("physical_capacity").first(), pl.col("drained").first(), pl.col("reserve").first(),
        pl.col("capacity").first(), pl.col("current_quota").sum().alias("current"),
        pl.col("planned_quota").sum().alias("planned"), pl.col("conflict").drop_nulls().first(),
    )
    parts = [svg.stacked_bar_chart(
        "Nominal quotas per flavor and resource: current vs planned (capacity for quotas in the table)",
        [f"{r['flavor']} {r['resource']}" for r in pools.iter_rows(named=True)],
        [svg.Series("current", tuple(float(v or 0) for v in pools["current"].to_list()), svg.PALETTE[1]),
         svg.Series("planned", tuple(float(v) for v in pools["planned"].to_list()), svg.PALETTE[0])],
    )]
    parts.append(h.table(pools, [
        h.Col("flavor", "flavor", h.text, numeric=False), h.Col("resource", "resource", h.text, numeric=False),
        h.Col("physical_capacity", "units"), h.Col("drained", "on drain candidates"), h.Col("reserve", "reserve"),
        h.Col("capacity", "capacity line (for quotas)"), h.Col("current", "current sum"),
        h.Col("planned", "planned sum"), h.Col("conflict", "conflict", h.text, numeric=False),
    ]))
    parts.append(h.table(plan, [
        h.Col("cluster_queue", "queue", h.text, numeric=False), h.Col("flavor", "flavor", h.text, numeric=False),
        h.Col("resource", "resource", h.text, numeric=False), h.Col("weight", "weight"),
        h.Col("current_quota", "current"), h.Col("planned_quota", "next apply"), h.Col("target_quota", "target"),
        h.Col("demand_p95", "P95 demand"), h.Col("binding_constraint", "binding", h.text, numeric=False),
        h.Col("explanation", "why", h.text, numeric=False),
    ], limit=MAX_ROWS * 2))
    intro = (
        f"Quota plan {r0['run_id']}: every ClusterQueue of a flavor and resource decided together by weighted "
        "max-min water-filling under capacity (drain candidates out) less the reserve; evidence "
        f"{r0['window_start']:%Y-%m-%d %H:%M} .. {r0['window_end']:%Y-%m-%d %H:%M} UTC."
    )
    return h.section("plan", "Quota plan", "".join(parts), intro=intro)


_SECTIONS: tuple[tuple[str, str, Callable[[_Build], str]], ...] = (
    ("summary", "Summary", _summary),
    ("capacity", "Capacity over time", _capacity),
    ("idle", "Idle by tenant", _idle_by_tenant),
    ("cost", "Cost split", _cost_split),
    ("chargeback", "Chargeback by tenant", _chargeback_index),
    ("risk", "Isolation risk", _risk),
    ("recommendations", "Recommendations", _recommendations),
    ("mig-layout", "MIG layout", lambda b: mig_layout_section(b.reader)),
    ("plan", "Quota plan", _quota_plan),
    ("health", "Health", _health),
    ("placement", "Placement", lambda b: placement_section(b.reader, MAX_ROWS)),
    ("health-timeline", "Health timeline", lambda b: health_timeline_section(b.reader)),
)


def _guarded_section(anchor: str, title: str, fn: Callable[[_Build], str], b: _Build) -> str:
    body = _guarded(fn, b)
    return body if body.startswith("<section") else h.section(anchor, title, body)


# -- data files -----------------------------------------------------------------------------------------


def _files_section(b: _Build) -> str:
    notes = []
    for write, what in ((_write_focus, "FOCUS chargeback files"), (_write_tenants, "per-tenant CSV")):
        try:
            write(b)
        except AnalysisMissing as exc:
            notes.append(h.notice(f"No {what}: {exc}."))
        except OSError as exc:
            raise UserError(f"cannot write the {what} into {b.out_dir}: {exc.strerror or exc}") from exc
    items = "".join(f'<li><a href="{h.esc(name)}">{h.esc(name)}</a>: {h.esc(what)}</li>' for name, what in b.files)
    return h.section("files", "Data files", f'<ul class="files">{items}</ul>' + "".join(notes),
                     intro="Next to this page, for spreadsheets and FinOps tools.")


def _write_focus(b: _Build) -> None:
    """The analytics engineer's FOCUS export (``analytics.chargeback.write_focus``) of the newest run."""
    paths = b.reader.write_focus(b.out_dir)
    rows = b.reader.focus_rows()
    holds = {fmt.path(b.out_dir): fmt.holds for fmt in chosen(None)}
    for path in paths:
        b.files.append((path.name, f"{holds[path]} ({rows} rows; x_ columns are gpulens extensions)"))


def _write_tenants(b: _Build) -> None:
    """``tenants.csv``: one header, the same columns for every tenant and scope (a state a tenant never had
    bills 0; a risk score not computed stays empty, not 0)."""
    usage = b.reader.tenant_usage()
    accounts = b.reader.chargeback_by_account().filter(pl.col("tenant").is_not_null())
    billed_cols = [f"billed_{s.replace('-', '_')}_usd" for s in TENANT_COST_STATES]
    billed = (
        accounts.pivot(on="state", index="tenant", values="billed_usd", aggregate_function="sum")
        .rename(lambda c: c if c == "tenant" else f"billed_{c.replace('-', '_')}_usd")
        if accounts.height else pl.DataFrame(schema={"tenant": pl.String})
    )
    billed = billed.with_columns(pl.lit(0.0).alias(c) for c in billed_cols if c not in billed.columns)
    billed = billed.select("tenant", *billed_cols).fill_null(0.0)
    billed = billed.with_columns(pl.sum_horizontal(billed_cols).alias("billed_total_usd"))
    frame = usage.join(billed, on="tenant", how="full", coalesce=True)
    try:
        risk = b.reader.isolation_scores("tenant").rename({"subject": "tenant", "score": "isolation_risk_score"})
        frame = frame.join(risk.select("tenant", "isolation_risk_score"), on="tenant", how="left")
    except AnalysisMissing:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias("isolation_risk_score"))
    safe_frame(frame.sort("tenant").with_columns(pl.col(pl.Float64).round(6))).write_csv(b.out_dir / TENANTS_CSV)
    b.files.append((TENANTS_CSV, f"one row per tenant: GE-hours by state, cost by state, risk score ({frame.height} rows)"))

