"""Health: GPUs and nodes to drain, early warnings with their lead, warnings with evidence, the latest XID events."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboards.streamlit.support import in_time_range, load, run_header, table, try_load
from gpulens.core.states import HealthState

st.title("Health and drain list")
run_header()
xids = in_time_range(load("recent_xids"), "ts")
health = try_load("health")
if health is None:
    st.subheader("Latest XID events")
    table(xids)
    st.stop()
assert health is not None
drain = health.filter(pl.col("drain_candidate"))
gpus = health.filter(pl.col("scope") == "gpu")
early = gpus.filter(pl.col("trend_start_ts").is_not_null()) if "trend_start_ts" in gpus.columns else gpus.clear()
cols = st.columns(4)
cols[0].metric("GPUs to drain", gpus.filter(pl.col("drain_candidate")).height)
cols[1].metric("GPUs on watch", gpus.filter(pl.col("state") == "watch").height,
               help="An early-warning trend is rising: keep new work off them before they fail.")
cols[2].metric("GPUs warned", gpus.filter(pl.col("state") == "warn").height)
cols[3].metric("GPUs ok", gpus.filter(pl.col("state") == "ok").height)

COLUMNS = ["scope", "node", "gpu_uuid", "state", "evidence", "first_evidence_ts", "last_evidence_ts"]
EARLY = ["node", "gpu_uuid", "state", "trend_start_ts", "warning_ts", "failure_ts", "lead_hours", "evidence"]
CONFIG = {
    "evidence": st.column_config.TextColumn("evidence", width="large"),
    "lead_hours": st.column_config.NumberColumn("lead (h)", format="%.1f",
                                                help="How long before the hard failure the warning came"),
}

st.subheader("Drain list")
if drain.height:
    table(drain.select(COLUMNS), **CONFIG)
else:
    st.success("No GPU needs draining.")
st.subheader("Early warnings")
if early.height:
    st.caption("Trends that precede hard failures: when each began, when it was raised, and the lead before "
               "the failure where one followed (empty: not failed in the window).")
    table(early.select(EARLY), **CONFIG)
else:
    st.success("No early-warning trend in the window.")
st.subheader("Warnings")
table(health.filter(pl.col("state") == HealthState.WARN.value).select(COLUMNS), **CONFIG)
st.subheader("Latest XID events")
table(xids)
