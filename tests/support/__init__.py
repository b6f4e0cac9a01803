"""Helpers shared by tests: real Prometheus/promtool runners, exporters in-process, fakes at our boundaries."""
