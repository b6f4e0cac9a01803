"""Grafana dashboards (generated from code) and the Streamlit app."""

DISTRIBUTION = "gpulens"  # checked by gpulens.core.own_packages: another package of this name is not ours
