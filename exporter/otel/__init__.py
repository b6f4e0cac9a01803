"""OpenTelemetry metrics and traces export (OTLP)."""
