"""Quota plan: per flavor and resource, current vs planned nominal quota per queue against the capacity line."""

from __future__ import annotations

import altair as alt
import polars as pl
import streamlit as st

from dashboards.streamlit.support import table, try_load

st.title("Quota plan")
plan = try_load("quota_plan")
if plan is None:
    st.stop()
assert plan is not None
first = plan.row(0, named=True)
st.caption(
    f"Plan {first['run_id']}: weighted max-min water-filling under capacity less drains and reserve; evidence "
    f"{first['window_start']:%Y-%m-%d %H:%M} .. {first['window_end']:%Y-%m-%d %H:%M} UTC."
)
pools = plan.select("flavor", "resource").unique(maintain_order=True)
labels = [f"{r['flavor']} {r['resource']}" for r in pools.iter_rows(named=True)]
choice = st.selectbox("Flavor and resource", labels)
flavor, resource = pools.row(labels.index(choice))
rows = plan.filter((pl.col("flavor") == flavor) & (pl.col("resource") == resource))
pool = rows.row(0, named=True)
cols = st.columns(4)
cols[0].metric("Units on the flavor", pool["physical_capacity"])
cols[1].metric("On drain candidates", pool["drained"])
cols[2].metric("Reserve", pool["reserve"])
cols[3].metric("Capacity for quotas", pool["capacity"])
if pool["conflict"]:
    st.error("Conflict: these queues keep their quotas: " + str(pool["conflict"]))
long = rows.select(
    "cluster_queue", pl.col("current_quota").alias("current"), pl.col("planned_quota").cast(pl.Float64).alias("planned"),
).unpivot(index="cluster_queue", variable_name="quota", value_name="units")
bars = alt.Chart(long.to_pandas()).mark_bar().encode(
    x=alt.X("cluster_queue:N", title="ClusterQueue"), xOffset="quota:N",
    y=alt.Y("units:Q", title=f"{resource} (nominal quota)"), color=alt.Color("quota:N", title=None),
    tooltip=["cluster_queue", "quota", "units"],
)
st.altair_chart(bars, width="stretch")
st.caption(f"Sum planned {int(rows['planned_quota'].sum())} of a capacity line of {pool['capacity']} units.")
table(
    rows.select("cluster_queue", "tenant", "weight", "current_quota", "planned_quota", "target_quota", "demand_p95",
                "pending_share", "binding_constraint", "explanation"),
    explanation=st.column_config.TextColumn("why", width="large"),
)
