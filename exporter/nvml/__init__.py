"""NVML device source: query funnel, GPM sampler, XID event thread."""
