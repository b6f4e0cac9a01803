"""Health: GPUs and nodes to drain, warnings with their evidence, and the latest XID events."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpulens.core.states import HealthState
from gpulens.dashboards.streamlit.support import load, run_header, try_load

st.title("Health and drain list")
run_header()
xids = load("recent_xids")
health = try_load("health")
if health is None:
    st.subheader("Latest XID events")
    st.dataframe(xids, hide_index=True, width="stretch")
    st.stop()
assert health is not None
drain = health.filter(pl.col("drain_candidate"))
gpus = health.filter(pl.col("scope") == "gpu")
cols = st.columns(3)
cols[0].metric("GPUs to drain", gpus.filter(pl.col("drain_candidate")).height)
cols[1].metric("GPUs warned", gpus.filter(pl.col("state") == HealthState.WARN.value).height)
cols[2].metric("GPUs ok", gpus.filter(pl.col("state") == HealthState.OK.value).height)

COLUMNS = ["scope", "node", "gpu_uuid", "state", "evidence", "first_evidence_ts", "last_evidence_ts"]
CONFIG = {"evidence": st.column_config.TextColumn("evidence", width="large")}

st.subheader("Drain list")
if drain.height:
    st.dataframe(drain.select(COLUMNS), hide_index=True, width="stretch", column_config=CONFIG)
else:
    st.success("No GPU needs draining.")
st.subheader("Warnings")
st.dataframe(
    health.filter(pl.col("state") == HealthState.WARN.value).select(COLUMNS), hide_index=True, width="stretch", column_config=CONFIG
)
st.subheader("Latest XID events")
st.dataframe(xids, hide_index=True, width="stretch")
