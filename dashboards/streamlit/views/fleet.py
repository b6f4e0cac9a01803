"""Fleet capacity: how many GPU-equivalents were active, idle, unmeasured or unallocated over time."""

from __future__ import annotations

import streamlit as st

from dashboards.streamlit import charts
from dashboards.streamlit.support import IDLE_RULE, in_time_range, load, overview, run_header, table

CHART_POINTS = 1000  # most time buckets drawn; longer windows average neighbouring buckets

st.title("Fleet capacity")
run_header()
info = overview()
cols = st.columns(5)
cols[0].metric("nodes", info["nodes"])
cols[1].metric("GPUs", info["gpus"])
cols[2].metric("devices (GPUs + MIG)", info["devices"])
cols[3].metric("tenants", info["tenants"])
cols[4].metric("GPU-equivalents", f"{info['total_ge'] or 0:.1f}")
st.caption(f"Samples from {info['first_sample']:%Y-%m-%d %H:%M} to {info['last_sample']:%Y-%m-%d %H:%M} (UTC).")

states = in_time_range(load("capacity_states", max_points=CHART_POINTS), "bucket")
st.subheader("Capacity states over time")
st.caption("Average GPU-equivalents (1 per GPU, g/7 per MIG slice) per state in each bucket. " + IDLE_RULE)
st.altair_chart(charts.capacity_area(states), width="stretch")
totals = states.drop("bucket").mean()
table(totals)

st.subheader("Stranded capacity by node")
st.caption("Free GPU-equivalents that no pending request shape could use (fragmentation).")
stranded = load("fragmentation_by_node")
if stranded.height == 0 or stranded["stranded_ge_hours"].sum() == 0:
    st.text("Nothing stranded in this window.")
if stranded.height:
    table(
        stranded, **{
            "stranded_ge_hours": st.column_config.NumberColumn("stranded GE-hours", format="localized"),
            "avg_free_ge": st.column_config.NumberColumn("avg free GE (buckets with free capacity)", format="%.2f"),
            "why": st.column_config.TextColumn("why (reason holding most of the node's stranded GE-hours)"),
            "why_share": st.column_config.NumberColumn("that reason, share of the node's stranded GE-hours",
                                                       format="percent"),
        },
    )
