"""Placement by topology: workloads spread over more domains than needed, by tenant, and free GPUs stranded per domain."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboards.streamlit.support import run_header, table, try_load

st.title("Placement by topology")
run_header()
st.caption(
    "Per multi-GPU workload and level (NVLink, NUMA, node, rack, block, zone): domains its GPUs spanned against "
    "the fewest that could hold them, given the fleet's shapes. Levels a GPU has no reading for are not measured."
)
worse = try_load("placement_worse")
if worse is not None:
    st.subheader("Workloads placed worse than needed, by tenant")
    if worse.height == 0:
        st.text("Every multi-GPU workload sat in as few domains as its size allows.")
    else:
        # A workload's GE-hours in a worse placement count once (its worst level), then add up per tenant, as
        # the report's placement section sums them.
        by_tenant = (
            worse.group_by("tenant", "namespace", "workload_kind", "workload")
            .agg(pl.col("ge_hours_affected").max())
            .group_by("tenant")
            .agg(workloads=pl.len(), ge_hours_affected=pl.col("ge_hours_affected").sum())
            .sort("ge_hours_affected", "tenant", descending=[True, False])
        )
        table(by_tenant)
        tenants = sorted(worse["tenant"].unique().to_list())
        picked = st.selectbox("Tenant", ["all", *tenants], key="placement_tenant")
        shown = worse if picked == "all" else worse.filter(pl.col("tenant") == picked)
        table(shown)
stranded = try_load("placement_stranded")
if stranded is not None:
    st.subheader("Free GPUs stranded by topology, per domain")
    st.caption("At the window's last sample: free GPUs in a domain too small for any common pod or job shape, "
               "while its parent has room for one.")
    if stranded.height == 0:
        st.text("No domain with free GPUs in this scope.")
    else:
        st.metric("GPUs stranded by topology", int(stranded["stranded_gpus"].sum()))
        table(stranded)
