"""``write_report``: the self-contained HTML report plus its CSV and Parquet files, from a store.

The report reads the store read-only. Each section stands alone: a section whose analysis has not
run yet shows which command to run, the others still render.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from gpulens.analytics.report import html_parts as h
from gpulens.analytics.report import svg
from gpulens.analytics.report.data import AnalysisMissing, StoreReader
from gpulens.analytics.report.health_timeline import section as health_timeline_section
from gpulens.core.errors import UserError

INDEX = "index.html"
TENANTS_CSV = "tenants.csv"
CHART_POINTS = 400
"""Most x positions in a time chart; longer windows average neighbouring buckets."""
MAX_ROWS = 25
"""Longest list shown in a chart or table; the CSV files hold every row."""


@dataclass
class _Build:
    """What the sections produce while the report is assembled."""

    reader: StoreReader
    out_dir: Path
    files: list[tuple[str, str]] = field(default_factory=list)
    """(file name, description) of every data file written."""


def write_report(db_path: str | Path, out_dir: str | Path, *, now: datetime | None = None) -> Path:
    """Write ``index.html`` (charts inline, no network needed), the FOCUS chargeback as CSV and Parquet,
    and a per-tenant CSV into ``out_dir``; return the path of ``index.html``.

    Raises ``UserError`` when the store cannot be read or ``out_dir`` cannot be written.
    """
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    reader = StoreReader.open(db_path)
    try:
        reader.require_store()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create {out}: {exc.strerror or exc}") from exc
        build = _Build(reader, out)
        sections = [(anchor, title, _guarded_section(anchor, title, fn, build)) for anchor, title, fn in _SECTIONS]
        sections.append(("files", "Data files", _files_section(build)))
        overview = reader.overview().row(0, named=True)
        generated = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
        meta = (
            f"Store {Path(db_path).name} · {overview['nodes']} nodes, {overview['gpus']} GPUs, "
            f"{overview['devices']} devices · samples {h.fmt_time(overview['first_sample'])} to "
            f"{h.fmt_time(overview['last_sample'])} · generated {generated}"
        )
        document = h.page(
            "gpulens report: GPU capacity, idle cost, isolation risk",
            meta,
            [(anchor, title) for anchor, title, _ in sections],
            "".join(body for _, _, body in sections),
        )
        index = out / INDEX
        _write_text(index, document)
        return index
    finally:
        reader.close()


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
    run = b.reader.latest_run().row(0, named=True)
    split = {r["state"]: r for r in b.reader.cost_split().iter_rows(named=True)}
    total = sum(r["billed_usd"] for r in split.values())
    idle = split.get("idle", {}).get("billed_usd", 0.0)
    unallocated = sum(split.get(s, {}).get("billed_usd", 0.0) for s in ("unallocated", "shared-unallocated"))
    idle_ge_h = split.get("idle", {}).get("ge_hours", 0.0)
    cards = h.cards([
        ("total GPU cost", h.fmt_usd(total)),
        ("allocated but idle", h.fmt_usd(idle)),
        ("unallocated", h.fmt_usd(unallocated)),
        ("idle GPU-hours", h.fmt_number(idle_ge_h, 1)),
        ("idle + unallocated share", h.fmt_percent((idle + unallocated) / total if total else None)),
    ])
    window = f"Analysis window {h.fmt_time(run['window_start'])} to {h.fmt_time(run['window_end'])} (run {run['run_id']})."
    return h.section("summary", "Summary", cards, intro=window)


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
        "Average GPU-equivalents (1 per GPU, g/7 per MIG slice) in each state per time bucket. "
        "Idle = allocated with activity below the threshold; unmeasured = allocated, no activity reading."
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
    chart = svg.stacked_bar_chart("GPU-hours held per tenant, idle first", names, series, unit="GE-h")
    table = h.table(usage, [
        h.Col("tenant", "tenant", h.text, numeric=False),
        h.Col("idle_ge_hours", "idle GE-h"),
        h.Col("active_ge_hours", "active GE-h"),
        h.Col("unmeasured_ge_hours", "unmeasured GE-h"),
        h.Col("idle_share", "idle share", h.fmt_percent),
        h.Col("idle_cost_usd", "idle cost", h.fmt_usd),
        h.Col("held_cost_usd", "held cost", h.fmt_usd),
    ])
    intro = "GPU-equivalent hours each tenant held, split by what it did with them, most idle first."
    return h.section("idle", "Idle capacity by tenant", chart + table, intro=intro)


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
        h.Col("target", "target", h.text, numeric=False), h.Col("change", "change", h.text, numeric=False),
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
                      ("GPUs warned", str(health.filter((pl.col("state") == "warn") & (pl.col("scope") == "gpu")).height)),
                      ("GPUs ok", str(health.filter((pl.col("state") == "ok") & (pl.col("scope") == "gpu")).height))])]
    columns = [
        h.Col("scope", "scope", h.text, numeric=False), h.Col("node", "node", h.text, numeric=False),
        h.Col("gpu_uuid", "GPU", h.text, numeric=False), h.Col("state", "state", h.text, numeric=False),
        h.Col("last_evidence_ts", "last evidence", h.fmt_time, numeric=False),
        h.Col("evidence", "evidence", h.text, numeric=False),
    ]
    parts.append("<h3>Drain list</h3>")
    parts.append(h.table(drain, columns) if drain.height else "<p>No GPU needs draining.</p>")
    warn = health.filter(pl.col("state") == "warn")
    if warn.height:
        parts.append("<h3>Warnings</h3>" + h.table(warn, columns, limit=MAX_ROWS))
    try:
        frag = b.reader.fragmentation_by_node().head(MAX_ROWS)
    except AnalysisMissing as exc:
        parts.append(h.notice(f"{exc}."))
    else:
        parts.append("<h3>Stranded capacity (fragmentation)</h3>" + h.table(frag, [
            h.Col("node", "node", h.text, numeric=False), h.Col("gpu_model", "model", h.text, numeric=False),
            h.Col("stranded_ge_hours", "stranded GE-h"), h.Col("avg_free_ge", "avg free GE"),
            h.Col("last_reason", "why", h.text, numeric=False),
        ]))
    return h.section("health", "Health and drain list", "".join(parts))


_SECTIONS: tuple[tuple[str, str, Callable[[_Build], str]], ...] = (
    ("summary", "Summary", _summary),
    ("capacity", "Capacity over time", _capacity),
    ("idle", "Idle by tenant", _idle_by_tenant),
    ("cost", "Cost split", _cost_split),
    ("risk", "Isolation risk", _risk),
    ("recommendations", "Recommendations", _recommendations),
    ("health", "Health", _health),
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
    for path in paths:
        what = "FOCUS 1.2 cost and usage rows" if path.suffix == ".csv" else "the same rows as Parquet"
        b.files.append((path.name, f"{what} ({rows} rows; x_ columns are gpulens extensions)"))


def _write_tenants(b: _Build) -> None:
    usage = b.reader.tenant_usage()
    billed = (
        b.reader.chargeback_by_account().filter(pl.col("tenant").is_not_null())
        .pivot(on="state", index="tenant", values="billed_usd", aggregate_function="sum")
        .fill_null(0.0)
    )
    billed = billed.rename({c: f"billed_{c.replace('-', '_')}_usd" for c in billed.columns if c != "tenant"})
    billed = billed.with_columns(pl.sum_horizontal([c for c in billed.columns if c != "tenant"]).alias("billed_total_usd"))
    frame = usage.join(billed, on="tenant", how="full", coalesce=True)
    try:
        risk = b.reader.isolation_scores("tenant").rename({"subject": "tenant", "score": "isolation_risk_score"})
        frame = frame.join(risk.select("tenant", "isolation_risk_score"), on="tenant", how="left")
    except AnalysisMissing:
        pass
    frame.sort("tenant").with_columns(pl.col(pl.Float64).round(6)).write_csv(b.out_dir / TENANTS_CSV)
    b.files.append((TENANTS_CSV, f"one row per tenant: GE-hours by state, cost by state, risk score ({frame.height} rows)"))

