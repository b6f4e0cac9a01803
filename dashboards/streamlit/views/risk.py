"""Isolation risk: a heat map of the score terms per tenant or per GPU, with the reason of each term."""

from __future__ import annotations

import streamlit as st

from dashboards.streamlit import charts
from dashboards.streamlit.support import load, run_header, table

st.title("Isolation risk")
run_header()
st.caption("Score 0..100 = the sum of the points of its terms; hover a cell for the reason.")
scope = st.radio("Scope", ["tenant", "device"], horizontal=True, key="scope")
terms = load("isolation_terms", scope=scope)
scores = load("isolation_scores", scope=scope)
if terms.height:
    st.altair_chart(charts.risk_heat_map(terms), width="stretch")
else:
    st.text("No risk term applies to any subject in this scope.")
st.subheader("Scores")
table(scores)
st.subheader("Terms and reasons")
table(terms)
