"""The part of a GPU a pod asks for when it shares one: HAMi, KAI GPU fractions, milli-GPU and gpushare requests.

Read from the pod object alone (pure, no I/O), so that the exporter (which attributes the pod's
allocation) and the collector (which stores the pod's requests and its pending shape) agree:

- HAMi: ``nvidia.com/gpucores`` (percent of the GPU's cores), ``nvidia.com/gpumem`` (MiB) or
  ``nvidia.com/gpumem-percentage`` (percent of its memory), for each of ``nvidia.com/gpu`` vGPUs;
- KAI Scheduler: the pod annotations ``gpu-fraction`` (a ratio of one GPU) and ``gpu-memory`` (MiB),
  on ``gpu-fraction-num-devices`` GPUs;
- milli-GPU (Alibaba's FGD / open-gpu-share): ``alibabacloud.com/gpu-milli`` (1000 = one GPU), as an
  extended resource or an annotation, on ``alibabacloud.com/gpu-count`` GPUs;
- gpushare and cGPU: ``aliyun.com/gpu-mem`` (GiB), ``aliyun.com/gpu-core.percentage``;
- Koordinator: ``koordinator.sh/gpu-core`` and ``koordinator.sh/gpu-memory-ratio`` (percent),
  ``koordinator.sh/gpu-memory`` (bytes).

A holder's share of a GPU, in GPU-equivalents, is the larger of its compute and memory fractions: what
it takes from the others sharing the GPU. A request that asks for all of a GPU is not fractional.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpulens.core.quantity import parse_quantity

MIB = 2**20
GIB = 2**30
KAI_FRACTION = "gpu-fraction"
KAI_MEMORY_ANNOTATION = "gpu-memory"
KAI_DEVICES = "gpu-fraction-num-devices"
KAI_GPU_GROUP = "runai-gpu-group"
"""Label KAI puts on a fraction pod and on the reservation pod that holds its GPU for the group."""
KAI_RESERVATION_NAMESPACES = ("kai-resource-reservation", "runai-reservation")
"""Where KAI's reservation pods run: each holds one whole GPU in PodResources for its group's fractions."""
GPU_MILLI = "alibabacloud.com/gpu-milli"
GPU_COUNT = "alibabacloud.com/gpu-count"
FRACTION_RESOURCES = (
    "nvidia.com/gpucores", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
    GPU_MILLI, GPU_COUNT, "aliyun.com/gpu-mem", "aliyun.com/gpu-core.percentage", "aliyun.com/gpu-count",
    "koordinator.sh/gpu-core", "koordinator.sh/gpu-memory", "koordinator.sh/gpu-memory-ratio",
)
"""Extended resources that ask for part of a GPU (or count the GPUs such a part is asked on)."""
FRACTION_ANNOTATIONS = (KAI_FRACTION, KAI_MEMORY_ANNOTATION, KAI_DEVICES, GPU_MILLI, GPU_COUNT)
"""Pod annotations that ask for part of a GPU (KAI, and the milli-GPU simulators' annotations)."""
_EPS = 1e-9


@dataclass(frozen=True)
class GpuShare:
    """What part of each GPU a pod asks for; ``None`` where the request does not say."""

    compute: float | None
    """Ratio 0..1 of the GPU's compute."""
    memory_ratio: float | None = None
    """Ratio 0..1 of the GPU's memory."""
    memory_bytes: int | None = None
    """Memory of the GPU, in bytes."""
    gpus: int = 1
    """How many GPUs the pod holds this part of."""
    scheme: str = ""
    """Who asked for it: ``hami``, ``kai``, ``gpu-milli``, ``gpushare``, ``koordinator``."""

    def share(self, memory_total_bytes: int | float | None = None) -> float | None:
        """GPU-equivalents held on one GPU: the larger of the compute and memory fractions (memory bytes
        count once the GPU's memory is known); ``None`` when nothing stated is a fraction of this GPU."""
        parts = [p for p in (self.compute, self.memory_ratio) if p is not None]
        if self.memory_bytes is not None and memory_total_bytes:
            parts.append(self.memory_bytes / float(memory_total_bytes))
        return min(1.0, max(parts)) if parts else None


def _ratio(value: Any, per_whole: float) -> float | None:
    number = parse_quantity(value)
    return None if number is None or number <= 0 else number / per_whole


def _count(value: Any) -> int:
    number = parse_quantity(value)
    return max(1, int(number)) if number else 1


def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """Resource name -> quantity the pod's containers ask for (limits, overridden by requests), summed."""
    total: dict[str, float] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        res = container.get("resources") or {}
        wanted = dict(res.get("limits") or {})
        wanted.update(res.get("requests") or {})
        for name, qty in wanted.items():
            value = parse_quantity(qty)
            if value:
                total[name] = total.get(name, 0.0) + value
    return total


def fraction_annotations(pod: Mapping[str, Any]) -> dict[str, float]:
    """The fraction annotations of a pod (KAI's, the milli-GPU ones) as numbers, by annotation name."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    out = {}
    for name in FRACTION_ANNOTATIONS:
        value = parse_quantity(annotations.get(name))
        if value:
            out[name] = value
    return out


def pod_gpu_share(pod: Mapping[str, Any]) -> GpuShare | None:
    """The part of a GPU the pod asks for, or ``None`` when it asks for whole GPUs (or none)."""
    req = pod_requests(pod)
    notes = fraction_annotations(pod)
    found = _hami(req) or _kai(notes) or _milli(req, notes) or _gpushare(req) or _koordinator(req)
    if found is None:
        return None
    whole = all(p is None or p >= 1.0 - _EPS for p in (found.compute, found.memory_ratio)) and found.memory_bytes is None
    return None if whole else found


def _hami(req: Mapping[str, float]) -> GpuShare | None:
    cores = _ratio(req.get("nvidia.com/gpucores"), 100.0)
    mem = req.get("nvidia.com/gpumem")
    mem_pct = _ratio(req.get("nvidia.com/gpumem-percentage"), 100.0)
    if cores is None and mem is None and mem_pct is None:
        return None
    return GpuShare(cores, mem_pct, int(mem * MIB) if mem else None, _count(req.get("nvidia.com/gpu")), "hami")


def _kai(notes: Mapping[str, float]) -> GpuShare | None:
    fraction = notes.get(KAI_FRACTION)
    memory = notes.get(KAI_MEMORY_ANNOTATION)
    if fraction is None and memory is None:
        return None
    return GpuShare(fraction, fraction, int(memory * MIB) if memory else None, _count(notes.get(KAI_DEVICES)), "kai")


def _milli(req: Mapping[str, float], notes: Mapping[str, float]) -> GpuShare | None:
    milli = req.get(GPU_MILLI) or notes.get(GPU_MILLI)
    if not milli:
        return None
    count = _count(req.get(GPU_COUNT) or notes.get(GPU_COUNT))
    return GpuShare(min(milli / 1000.0, 1.0), None, None, count, "gpu-milli")


def _gpushare(req: Mapping[str, float]) -> GpuShare | None:
    memory = req.get("aliyun.com/gpu-mem")
    core = _ratio(req.get("aliyun.com/gpu-core.percentage"), 100.0)
    if memory is None and core is None:
        return None
    return GpuShare(core, None, int(memory * GIB) if memory else None, _count(req.get("aliyun.com/gpu-count")),
                    "gpushare")


def _koordinator(req: Mapping[str, float]) -> GpuShare | None:
    core = _ratio(req.get("koordinator.sh/gpu-core"), 100.0)
    ratio = _ratio(req.get("koordinator.sh/gpu-memory-ratio"), 100.0)
    memory = req.get("koordinator.sh/gpu-memory")
    if core is None and ratio is None and memory is None:
        return None
    return GpuShare(core, ratio, int(memory) if memory else None, 1, "koordinator")
