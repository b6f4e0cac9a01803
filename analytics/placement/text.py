"""Placement findings of the newest analysis run as a few plain-text lines (``gpulens demo``, ``gpulens analyze``)."""

from __future__ import annotations

from pathlib import Path

from collector.store_errors import connect_store, reading_store


def render_placement(db_path: str | Path, limit: int = 10) -> str:
    """Workloads spread over more domains than needed, and free GPUs stranded by topology, of the newest run."""
    with connect_store(db_path, read_only=True) as con, reading_store(db_path):
        run = con.execute("SELECT run_id FROM analysis_runs ORDER BY created_at DESC LIMIT 1").fetchone()
        if run is None:
            return "Placement by topology: no analysis run yet."
        worse = con.execute(
            """
            SELECT tenant, workload_kind || '/' || workload, level, domains_spanned, min_domains, ge_hours_affected
            FROM placement WHERE run_id = ? AND placed_worse
            ORDER BY ge_hours_affected DESC, tenant, workload, level LIMIT ?
            """,
            [run[0], limit],
        ).fetchall()
        measured = con.execute(
            "SELECT count(DISTINCT (namespace, workload_kind, workload)) FROM placement WHERE run_id = ?", [run[0]]
        ).fetchone()
        stranded = con.execute(
            """
            SELECT level, domain, stranded_gpus, parent, parent_free_gpus FROM topology_stranded
            WHERE run_id = ? AND stranded_gpus > 0 ORDER BY stranded_gpus DESC, level, domain LIMIT ?
            """,
            [run[0], limit],
        ).fetchall()
    lines = [f"Placement by topology: {measured[0] if measured else 0} multi-GPU workload(s) measured, "
             f"{len({w[1] for w in worse})} spread wider than needed."]
    for tenant, workload, level, spanned, least, ge_h in worse:
        lines.append(f"  {tenant:<16} {workload:<32} {level:<6} {spanned} domains, {least} would do "
                     f"({ge_h:,.1f} GE-h)")
    if stranded:
        lines.append("Free GPUs stranded by topology (end of window):")
        for level, domain, n, parent, parent_free in stranded:
            lines.append(f"  {level:<6} {domain:<32} {n} stranded ({parent} has {parent_free} free)")
    return "\n".join(lines)
