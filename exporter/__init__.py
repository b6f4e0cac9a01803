"""Per-node agent: device sources (NVML, simulated), allocations, Prometheus and OpenTelemetry output."""
