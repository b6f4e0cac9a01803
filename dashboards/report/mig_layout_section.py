"""The report's "MIG layout" section: current vs proposed layout per node, and what the plan frees."""

from __future__ import annotations

import polars as pl

from analytics.miglayout.run import LayoutRun
from analytics.miglayout.tenant_view import SHARED_DEVICE
from dashboards.report import html_parts as h
from dashboards.report.data import StoreReader


def mig_layout_section(reader: StoreReader) -> str:
    """Current vs proposed MIG layout per GPU that changes, reused instances, what does not fit."""
    if not reader.has("recommendations"):  # the Recommendations section already says what to run
        return h.section("mig-layout", "MIG layout", "<p>Planned from the newest recommendation run: none yet.</p>")
    return layout_run_section(reader.mig_layout())


def layout_run_section(run: LayoutRun | None) -> str:
    """The section for a layout plan (the fleet's, or a tenant's view of it)."""
    if run is None or not run.plan.demands:
        return h.section("mig-layout", "MIG layout", "<p>No workload has a confident move to another MIG "
                         "profile in the newest recommendation run: no MIG layout change proposed.</p>")
    p = run.plan
    cards = h.cards([
        ("GPUs to repartition", f"{len(p.changes)} on {len(p.nodes_changed)} node(s)"),
        ("whole GPUs freed", str(p.whole_gpus_freed)),
        ("GE-hours freed over the window", h.fmt_number(run.ge_hours_freed, 1)),
        ("per month at the price paid", h.fmt_usd(run.usd_per_month_freed)),
    ])
    changes = pl.DataFrame(
        {
            "node": [c.gpu.node for c in p.changes],
            "gpu": [str(c.gpu.index) if c.gpu.index is not None else c.gpu.gpu_uuid for c in p.changes],
            "current": ["+".join(c.gpu.layout) or "whole GPU" for c in p.changes],
            "proposed": ["+".join(c.layout) for c in p.changes],
            "serves": ["; ".join(f"{w} ({pr})" for w, pr in c.serves) for c in p.changes],
            "spare": [c.spare for c in p.changes],
            "note": [SHARED_DEVICE if c.shared else "" for c in p.changes],
        },
        schema={"node": pl.String, "gpu": pl.String, "current": pl.String, "proposed": pl.String,
                "serves": pl.String, "spare": pl.Int64, "note": pl.String},
    )
    parts = [cards, h.table(changes, [
        h.Col("node", "node", h.text, numeric=False), h.Col("gpu", "GPU", h.text, numeric=False),
        h.Col("current", "current layout", h.text, numeric=False),
        h.Col("proposed", "proposed layout", h.text, numeric=False),
        h.Col("serves", "serves", h.text, numeric=False), h.Col("spare", "spare instances", h.text),
        *([h.Col("note", "note", h.text, numeric=False)] if any(c.shared for c in p.changes) else []),
    ])] if p.changes else [cards]
    if p.reused:
        reused = pl.DataFrame({"workload": [r.workload for r in p.reused], "profile": [r.profile for r in p.reused],
                               "node": [r.node for r in p.reused]})
        parts.append("<h3>Served by free MIG instances that exist today</h3>" + h.table(reused, [
            h.Col("workload", "workload", h.text, numeric=False), h.Col("profile", "profile", h.text, numeric=False),
            h.Col("node", "node", h.text, numeric=False)]))
    if p.unplaced:
        unplaced = pl.DataFrame({"workload": [u.workload for u in p.unplaced], "profile": [u.profile for u in p.unplaced],
                                 "count": [u.count for u in p.unplaced], "reason": [u.reason for u in p.unplaced]})
        parts.append("<h3>Does not fit</h3>" + h.table(unplaced, [
            h.Col("workload", "workload", h.text, numeric=False), h.Col("profile", "profile", h.text, numeric=False),
            h.Col("count", "instances", h.text), h.Col("reason", "why", h.text, numeric=False)]))
    if p.pending_moves:
        pending = pl.DataFrame({"workload": [d.workload for d in p.pending_moves],
                                "profile": [d.profile for d in p.pending_moves],
                                "pending": [d.pending or "" for d in p.pending_moves]})
        parts.append("<h3>Moves onto a profile that already has pending work</h3>" + h.table(pending, [
            h.Col("workload", "workload", h.text, numeric=False), h.Col("profile", "profile", h.text, numeric=False),
            h.Col("pending", "pending work", h.text, numeric=False)]))
    intro = (
        f"Which GPUs to repartition so the recommended MIG profiles exist (valid placements per GPU model), "
        f"decided on the evidence window {h.fmt_time(run.window_start)} to {h.fmt_time(run.window_end)}. "
        f"Money: {h.esc(run.money_words())} (price book: {h.esc(run.price_origin)}). "
        "Files: `gpulens recommend --target workloads`."
    )
    return h.section("mig-layout", "MIG layout", "".join(parts), intro=intro)
