"""Per-node agent: device sources (NVML, simulated), allocations, Prometheus and OpenTelemetry output."""

DISTRIBUTION = "gpulens"  # checked by gpulens.core.own_packages: another package of this name is not ours
