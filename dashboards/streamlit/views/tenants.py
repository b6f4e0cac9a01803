"""Tenants: chargeback by cost state and idle capacity per tenant."""

from __future__ import annotations

import polars as pl
import streamlit as st

from dashboards.streamlit import charts
from dashboards.streamlit.support import IDLE_RULE, load, run_header, table

st.title("Tenants")
run_header()

usage = load("tenant_usage")
st.subheader("Idle capacity by tenant")
st.caption("GPU-equivalent hours (GE-hours) each tenant held over the analysis window, by what it did with them. "
           + IDLE_RULE + " Costs are the chargeback's billed cents, as below.")
long = usage.unpivot(
    index="tenant", on=["active_ge_hours", "idle_ge_hours", "unmeasured_ge_hours"],
    variable_name="state", value_name="ge_hours",
).with_columns(pl.col("state").str.replace("_ge_hours", ""))
st.altair_chart(charts.stacked_bars(long, "tenant", "state", "ge_hours", "GE-hours"), width="stretch")
table(
    usage,
    idle_share=st.column_config.NumberColumn("idle, share of its held GE-hours", format="percent"),
    idle_cost_usd=st.column_config.NumberColumn("idle cost (billed, USD)", format="dollar"),
    held_cost_usd=st.column_config.NumberColumn("held cost (billed, USD)", format="dollar"),
)

accounts = load("chargeback_by_account")
st.subheader("Chargeback by account and cost state")
st.caption("FOCUS BilledCost in USD; capacity nobody held has its own account (__unallocated__).")
st.altair_chart(charts.stacked_bars(accounts, "account", "state", "billed_usd", "USD"), width="stretch")

tenant = st.selectbox("Tenant detail", usage["tenant"].to_list(), key="tenant")
if tenant is not None:
    st.text(f"Tenant: {tenant}")
    table(accounts.filter(pl.col("account") == tenant))
