"""Placement by topology, as pure functions: how many domains a workload's GPUs span, how few they could, how far apart.

Levels, innermost first: ``nvlink`` (GPUs joined by NVLink / NVSwitch, or one fabric clique), ``numa``
(a NUMA node of one host), ``node``, ``rack``, ``block``, ``zone`` (node labels, as Kueue topology-aware
scheduling uses them). A GPU whose key at a level is unknown makes that level unmeasured for every
workload that holds it: no figure is given for it, never a guess.

* ``domains_spanned``: distinct domains of the level holding the workload's GPUs.
* ``min_domains``: the fewest domains of that level whose *size* (not current occupancy) could hold
  them, given the fleet's shapes. Inside a node (nvlink, numa) GPUs of one pod may straddle domains,
  so it is ``ceil(GPUs / largest domain)``. From the node up a pod cannot straddle nodes, so a domain
  holds ``sum over its nodes of floor(node GPUs / smallest pod)`` pods, and the largest domains are
  taken first until every pod fits. Either way it never exceeds ``domains_spanned``.
* ``distance_score``: pair distance is the hop count of the innermost level two GPUs share
  (``HOPS``: 1 NVLink ... 6 zone, 7 none). The score is the farthest pair's hops plus a tenth of the
  mean pair's, so a placement inside one domain of a level always scores better than one that leaves
  it (the farthest pair decides; the mean only orders placements with the same farthest pair). That
  holds for the levels that nest (NVLink inside node inside rack ...); NUMA is about CPU-to-GPU
  traffic and is judged by its own ``numa`` row, since an NVSwitch joins GPUs of both NUMA nodes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

LEVELS = ("nvlink", "numa", "node", "rack", "block", "zone")
"""Topology levels, innermost first."""
INTRA_NODE = frozenset({"nvlink", "numa"})
HOPS = {"nvlink": 1, "numa": 2, "node": 3, "rack": 4, "block": 5, "zone": 6}
FAR = 7
"""Hops of a pair that shares no known level."""


@dataclass(frozen=True)
class GpuPlace:
    """Where one GPU sits: its domain key at each level (None where unknown)."""

    gpu_uuid: str
    node: str
    gpu_model: str
    keys: Mapping[str, str | None]

    def key(self, level: str) -> str | None:
        return self.keys.get(level)


@dataclass(frozen=True)
class LevelSpread:
    """One level of one placement: domains used against the fewest possible."""

    level: str
    domains_spanned: int
    min_domains: int
    domains: tuple[str, ...]

    @property
    def excess(self) -> int:
        return self.domains_spanned - self.min_domains


def place_keys(node: str, numa: int | None, nvlink: str | None, labels: Mapping[str, str | None]) -> dict[str, str | None]:
    """Domain keys of a GPU; rack / block / zone keys are paths (``zone/block/rack``) so names may repeat."""
    zone, block, rack = labels.get("zone"), labels.get("block"), labels.get("rack")
    return {
        "nvlink": nvlink,
        "numa": f"{node}/numa-{numa}" if numa is not None else None,
        "node": node,
        "rack": f"{zone or '?'}/{block or '?'}/{rack}" if rack else None,
        "block": f"{zone or '?'}/{block}" if block else None,
        "zone": zone,
    }


def domains_spanned(places: Sequence[GpuPlace], level: str) -> tuple[str, ...] | None:
    """Sorted distinct domains of ``level`` holding ``places``; None when any GPU's key is unknown."""
    keys = [p.key(level) for p in places]
    if any(k is None for k in keys):
        return None
    return tuple(sorted({k for k in keys if k is not None}))


def min_domains(level: str, devices: int, pod_sizes: Sequence[int], fleet: Sequence[GpuPlace]) -> int | None:
    """Fewest domains of ``level`` (sizes taken from ``fleet``) that could hold the pods; None if unknown."""
    if devices <= 0 or not pod_sizes:
        return None
    if level in INTRA_NODE:
        sizes = Counter(p.key(level) for p in fleet if p.key(level) is not None)
        if not sizes:
            return None
        return math.ceil(devices / max(sizes.values()))
    per_node = Counter(p.node for p in fleet)
    node_domain = {p.node: p.key(level) for p in fleet}
    smallest = max(1, min(pod_sizes))
    capacity: Counter[str] = Counter()
    for node, gpus in per_node.items():
        domain = node_domain[node]
        if domain is not None:
            capacity[domain] += gpus // smallest
    need, used = len(pod_sizes), 0
    for held in sorted(capacity.values(), reverse=True):
        if need <= 0:
            break
        need -= held
        used += 1
    if need > 0:
        return None  # the fleet as described cannot hold the workload at all: no claim
    return max(used, 1)


def pair_hops(places: Sequence[GpuPlace]) -> np.ndarray:
    """Hop count of every pair (upper triangle, i < j) of ``places``."""
    n = len(places)
    dist = np.full((n, n), FAR, dtype=np.int8)
    for level in reversed(LEVELS):  # outermost first, inner levels overwrite
        keys = [p.key(level) for p in places]
        codes = {k: i for i, k in enumerate(sorted({k for k in keys if k is not None}))}
        arr = np.array([codes[k] if k is not None else -1 - i for i, k in enumerate(keys)])
        dist[arr[:, None] == arr[None, :]] = HOPS[level]
    return dist[np.triu_indices(n, 1)]


def distance_score(places: Sequence[GpuPlace]) -> float | None:
    """Farthest pair's hops + mean pair hops / 10 (lower is closer); None for fewer than two GPUs."""
    if len(places) < 2:
        return None
    hops = pair_hops(places)
    return round(float(hops.max()) + float(hops.mean()) / 10.0, 4)


def spread(places: Sequence[GpuPlace], pod_sizes: Sequence[int], fleet: Sequence[GpuPlace]) -> list[LevelSpread]:
    """Every level measured for this placement (levels with an unknown key are left out)."""
    out = []
    for level in LEVELS:
        used = domains_spanned(places, level)
        if used is None:
            continue
        least = min_domains(level, len(places), pod_sizes, fleet)
        if least is None:
            continue
        out.append(LevelSpread(level, len(used), min(least, len(used)), used))
    return out
