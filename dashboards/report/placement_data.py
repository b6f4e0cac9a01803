"""Queries behind the placement section and page: placement findings and stranded-by-topology of the newest run."""

from __future__ import annotations

import polars as pl

from dashboards.report.data import StoreReader


def placement_run(reader: StoreReader) -> str | None:
    """The newest run that measured placement; None when the newest analysis found no multi-device workload.

    Raises ``AnalysisMissing`` when no analysis ran yet (or the store predates the placement table).
    """
    reader.require("analysis_runs")
    if not reader.has("placement"):
        if "placement" not in reader.tables():
            reader.require("placement")
        return None
    return reader._run_id("placement")  # noqa: SLF001 - the reader's own newest-run rule


def worse_placements(reader: StoreReader, run_id: str, tenant: str | None = None) -> pl.DataFrame:
    """Workload x level rows spread over more domains than needed, most GE-hours affected first."""
    return reader.frame(
        """
        SELECT tenant, namespace, workload_kind, workload, gpu_model, level, pods, devices, nodes,
               domains_spanned, min_domains, excess_domains, distance_score, ge_hours, ge_hours_affected, reason
        FROM placement WHERE run_id = ? AND placed_worse AND (? IS NULL OR tenant = ?)
        ORDER BY ge_hours_affected DESC, tenant, workload, level
        """,
        [run_id, tenant, tenant],
    )


def placement_by_tenant(reader: StoreReader, run_id: str) -> pl.DataFrame:
    """Per tenant: multi-device workloads, those placed worse than needed, GE-hours held and affected."""
    return reader.frame(
        """
        WITH w AS (
            SELECT tenant, namespace, workload_kind, workload, any_value(ge_hours) AS ge_hours,
                   max(ge_hours_affected) AS affected, bool_or(placed_worse) AS worse
            FROM placement WHERE run_id = ? GROUP BY tenant, namespace, workload_kind, workload
        )
        SELECT tenant, count(*) AS workloads, count(*) FILTER (WHERE worse) AS placed_worse,
               sum(ge_hours) AS ge_hours, sum(affected) AS ge_hours_affected
        FROM w GROUP BY tenant ORDER BY ge_hours_affected DESC, tenant
        """,
        [run_id],
    )


def stranded_domains(reader: StoreReader, run_id: str) -> pl.DataFrame:
    """Domains whose free GPUs are stranded by topology, most stranded first."""
    return reader.frame(
        """
        SELECT measured_at, level, domain, parent, gpu_model, free_gpus, stranded_gpus, parent_free_gpus,
               smallest_shape_gpus, reason
        FROM topology_stranded WHERE run_id = ? AND stranded_gpus > 0
        ORDER BY stranded_gpus DESC, level, domain
        """,
        [run_id],
    )
