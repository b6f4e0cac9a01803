"""The report's "Placement by topology" section: workloads spread wider than needed, and free GPUs stranded by topology."""

from __future__ import annotations

import polars as pl

from dashboards.report import html_parts as h
from dashboards.report import svg
from dashboards.report.data import StoreReader
from dashboards.report.placement_data import (
    placement_by_tenant,
    placement_run,
    stranded_domains,
    worse_placements,
)

ANCHOR, TITLE = "placement", "Placement by topology"


def placement_section(reader: StoreReader, max_rows: int = 25) -> str:
    """Cards, a per-tenant chart, the worse-placed workloads and the stranded domains of the newest run."""
    run_id = placement_run(reader)
    if run_id is None:
        return h.section(ANCHOR, TITLE, "<p>No workload held two or more whole GPUs in the analysed window: "
                                        "nothing to compare.</p>")
    worse = worse_placements(reader, run_id)
    tenants = placement_by_tenant(reader, run_id)
    stranded = stranded_domains(reader, run_id)
    workloads_worse = worse.select("namespace", "workload_kind", "workload").unique().height
    affected = worse.group_by("namespace", "workload_kind", "workload").agg(pl.col("ge_hours_affected").max())
    parts = [h.cards([
        ("multi-GPU workloads", str(int(tenants["workloads"].sum() or 0))),
        ("placed worse than needed", str(workloads_worse)),
        ("GE-hours in worse placements", h.fmt_number(float(affected["ge_hours_affected"].sum() or 0.0), 1)),
        ("free GPUs stranded by topology", str(int(stranded["stranded_gpus"].sum() or 0))),
    ])]
    if tenants.height:
        parts.append(svg.stacked_bar_chart(
            "GE-hours held by multi-GPU workloads, per tenant", tenants["tenant"].to_list(),
            [svg.Series("in a worse placement", tuple(tenants["ge_hours_affected"].to_list()), svg.PALETTE[4]),
             svg.Series("placed as tight as possible",
                        tuple((tenants["ge_hours"] - tenants["ge_hours_affected"]).to_list()), svg.PALETTE[0])],
            unit="GE-h",
        ))
    parts.append("<h3>Workloads placed worse than needed</h3>")
    parts.append(h.table(worse, [
        h.Col("tenant", "tenant", h.text, numeric=False), h.Col("workload", "workload", h.text, numeric=False),
        h.Col("workload_kind", "kind", h.text, numeric=False), h.Col("level", "level", h.text, numeric=False),
        h.Col("pods", "pods", h.text), h.Col("devices", "GPUs", h.text),
        h.Col("domains_spanned", "domains spanned", h.text), h.Col("min_domains", "fewest possible", h.text),
        h.Col("distance_score", "distance score"), h.Col("ge_hours_affected", "GE-h affected"),
        h.Col("reason", "why", h.text, numeric=False),
    ], limit=max_rows) if worse.height else "<p>Every multi-GPU workload sat in as few domains as its size allows.</p>")
    parts.append("<h3>Free GPUs stranded by topology</h3>")
    parts.append(h.table(stranded, [
        h.Col("level", "level", h.text, numeric=False), h.Col("domain", "domain", h.text, numeric=False),
        h.Col("gpu_model", "model", h.text, numeric=False), h.Col("free_gpus", "free GPUs", h.text),
        h.Col("stranded_gpus", "stranded", h.text), h.Col("parent", "parent", h.text, numeric=False),
        h.Col("parent_free_gpus", "parent free", h.text), h.Col("measured_at", "at", h.fmt_time, numeric=False),
        h.Col("reason", "why", h.text, numeric=False),
    ], limit=max_rows) if stranded.height else "<p>No free GPU is stranded by topology at the end of the window.</p>")
    intro = (
        "Per multi-GPU workload and topology level (NVLink, NUMA, node, rack, block, zone): how many domains its "
        "GPUs span against the fewest that could hold them given the fleet's shapes; GE-hours held while spread "
        "wider than needed. Stranded: free GPUs split across domains so that no common pod or job shape fits."
    )
    return h.section(ANCHOR, TITLE, "".join(parts), intro=intro)
