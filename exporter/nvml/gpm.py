"""GPM (GPU Performance Monitoring, Hopper and later): activity from two samples taken between cycles.

One sample is kept per key (a whole GPU, or a GPU instance of a MIG GPU) together with a fingerprint of
what the key stands for (for a GPU instance: its MIG UUIDs, profile and compute instances). When the
fingerprint changes the instance was destroyed and recreated with the same id: the old sample is dropped
instead of being diffed against a different instance. Samples closer than ``min_interval`` seconds reuse
the previous value (NVML wants samples >= 100 ms apart). Keys not seen in a cycle are freed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporter.nvml.funnel import NvmlFunnel

GpmKey = tuple[str, int | None]
"""(parent GPU UUID, GPU-instance id or ``None`` for the whole GPU)."""


@dataclass
class _Held:
    sample: Any
    taken_at: float
    fingerprint: str
    value: float | None = None


class GpmSampler:
    """Keeps GPM samples between cycles and turns consecutive pairs into a graphics-activity ratio."""

    def __init__(self, funnel: NvmlFunnel, *, min_interval: float = 0.1) -> None:
        self._funnel = funnel
        self._min_interval = min_interval
        self._held: dict[GpmKey, _Held] = {}
        self._seen: set[GpmKey] = set()

    def activity(self, key: GpmKey, handle: Any, fingerprint: str, now: float) -> float | None:
        """Graphics activity 0..1 of ``key`` since its previous sample; ``None`` on the first one.

        ``handle`` is the GPU handle (whole GPU) or the parent GPU handle (a GPU instance, ``key[1]``).
        """
        self._seen.add(key)
        held = self._held.get(key)
        if held is not None and held.fingerprint != fingerprint:
            self._free(held.sample)
            del self._held[key]
            held = None
        if held is not None and now - held.taken_at < self._min_interval:
            return held.value
        sample = self._take(handle, key[1])
        if sample is None:
            return None
        if held is None:
            self._held[key] = _Held(sample, now, fingerprint)
            return None
        value = self._graphics_util(held.sample, sample)
        self._free(held.sample)
        self._held[key] = _Held(sample, now, fingerprint, value)
        return value

    def end_cycle(self) -> None:
        """Free the samples of keys that were not asked for since the previous call (instances gone)."""
        for key in list(self._held):
            if key not in self._seen:
                self._free(self._held.pop(key).sample)
        self._seen = set()

    def forget_gpu(self, gpu_uuid: str) -> None:
        """Drop every sample of a GPU (it was lost or re-initialised)."""
        for key in [k for k in self._held if k[0] == gpu_uuid]:
            self._free(self._held.pop(key).sample)

    def close(self) -> None:
        for held in self._held.values():
            self._free(held.sample)
        self._held.clear()

    @property
    def held_keys(self) -> frozenset[GpmKey]:
        return frozenset(self._held)

    def _take(self, handle: Any, gpu_instance_id: int | None) -> Any:
        sample = self._funnel.call("nvmlGpmSampleAlloc")
        if sample is None:
            return None
        if gpu_instance_id is None:
            ok = self._funnel.call("nvmlGpmSampleGet", handle, sample)
        else:
            ok = self._funnel.call("nvmlGpmMigSampleGet", handle, gpu_instance_id, sample)
        if ok is None:
            self._free(sample)
            return None
        return sample

    def _graphics_util(self, first: Any, second: Any) -> float | None:
        nvml = self._funnel.nvml
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 1
        request.sample1 = first
        request.sample2 = second
        request.metrics[0].metricId = nvml.NVML_GPM_METRIC_GRAPHICS_UTIL
        if self._funnel.call("nvmlGpmMetricsGet", request) is None:
            return None
        metric = request.metrics[0]
        if int(metric.nvmlReturn) != 0:
            return None
        return min(1.0, max(0.0, float(metric.value) / 100.0))

    def _free(self, sample: Any) -> None:
        self._funnel.call("nvmlGpmSampleFree", sample)
