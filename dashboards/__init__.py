"""Grafana dashboards (generated from code) and the Streamlit app."""
