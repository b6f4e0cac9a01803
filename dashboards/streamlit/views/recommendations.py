"""Recommendations with the evidence behind each one: held vs used compute and memory over time."""

from __future__ import annotations

import json

import polars as pl
import streamlit as st

from dashboards.streamlit import charts
from dashboards.streamlit.support import in_time_range, load, table


def _readable(key: str, value: object) -> str:
    """Evidence figures in their units: bytes as GiB, GPU-equivalents with three decimals."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if key.endswith("_bytes"):
            return f"{value / 2**30:,.2f} GiB"
        if key.endswith("_ge"):
            return f"{value:.3f} GE"
        return f"{value:g}"
    return str(value)


st.title("Recommendations")
recs = load("recommendations")
scope = st.radio("Kind", ["workload", "quota", "mig_conversion"], horizontal=True, key="kind")
shown = recs.filter(pl.col("scope") == scope)
st.caption(f"{shown.height} of {recs.height} recommendations of the newest `gpulens recommend` run.")
table(
    shown.select("tenant", "target", "flavor", "change", "action", "confidence_label", "history_days", "reasons"),
    confidence_label=st.column_config.TextColumn("confidence"),
    history_days=st.column_config.NumberColumn("history (days)", format="%.1f"),
    reasons=st.column_config.TextColumn("why", width="large"),
)

workloads = recs.filter(pl.col("scope") == "workload")
if scope == "workload" and workloads.height:
    labels = [f"{r['target']} ({r['change']}, {r['action']})" for r in workloads.iter_rows(named=True)]
    choice = st.selectbox("Evidence for", range(len(labels)), format_func=lambda i: labels[i], key="workload")
    if choice is not None:
        row = workloads.row(choice, named=True)
        st.subheader("Evidence")
        st.text(f"{row['target']}: {row['change']} ({row['action']}, confidence {row['confidence_label']})")
        st.text(row["reasons"] or "")
        figures = json.loads(row["evidence"] or "{}")
        if figures:
            st.dataframe(
                pl.DataFrame({"figure": list(figures), "value": [_readable(k, v) for k, v in figures.items()]}),
                hide_index=True,
            )
        series = in_time_range(load("workload_series", namespace=row["target_namespace"], kind=row["target_kind"],
                      name=row["target_name"]), "bucket")
        left, right = st.columns(2)
        left.altair_chart(charts.evidence_lines(series), width="stretch")
        right.altair_chart(charts.memory_line(series), width="stretch")
