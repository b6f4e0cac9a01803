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
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from operator import attrgetter
from typing import cast

import numpy as np
import polars as pl

LEVELS = ("nvlink", "numa", "node", "rack", "block", "zone")
"""Topology levels, innermost first."""
INTRA_NODE = frozenset({"nvlink", "numa"})
HOPS = {"nvlink": 1, "numa": 2, "node": 3, "rack": 4, "block": 5, "zone": 6}
FAR = 7
"""Hops of a pair that shares no known level."""
_CHAIN = attrgetter("chain")
_INDEX = {level: i for i, level in enumerate(LEVELS)}


@dataclass(frozen=True)
class GpuPlace:
    """Where one GPU sits: its domain key at each level (None where unknown)."""

    gpu_uuid: str
    node: str
    gpu_model: str
    keys: Mapping[str, str | None]

    def key(self, level: str) -> str | None:
        return self.keys.get(level)

    @cached_property
    def chain(self) -> tuple[str | None, ...]:
        """Its keys at every level, in ``LEVELS`` order."""
        return tuple(map(self.keys.get, LEVELS))


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
    return {"nvlink": nvlink, "numa": f"{node}/numa-{numa}" if numa is not None else None, "node": node,
            **label_keys(labels)}


def label_keys(labels: Mapping[str, str | None]) -> dict[str, str | None]:
    """The rack, block and zone keys of a node's GPUs from the node's label values at those levels."""
    zone, block, rack = labels.get("zone"), labels.get("block"), labels.get("rack")
    return {
        "rack": f"{zone or '?'}/{block or '?'}/{rack}" if rack else None,
        "block": f"{zone or '?'}/{block}" if block else None,
        "zone": zone,
    }


SCHEMA = {"gpu_uuid": pl.Utf8, "gpu_model": pl.Utf8, **dict.fromkeys(LEVELS, pl.Utf8)}
"""A fleet as columns, one row per GPU: its UUID, model and key at each level (``node`` is also where it is)."""


def places_frame(places: Iterable[GpuPlace]) -> pl.DataFrame:
    """These places as the columns of :data:`SCHEMA`, in their order."""
    listed = list(places)
    columns: dict[str, list[str | None]] = {"gpu_uuid": [p.gpu_uuid for p in listed],
                                            "gpu_model": [p.gpu_model for p in listed]}
    columns |= {level: [p.chain[i] for p in listed] for i, level in enumerate(LEVELS)}
    return pl.DataFrame(columns, schema=SCHEMA)


def domains_spanned(places: Sequence[GpuPlace], level: str) -> tuple[str, ...] | None:
    """Sorted distinct domains of ``level`` holding ``places``; None when any GPU's key is unknown."""
    if level not in _INDEX:
        return _domains({p.key(level) for p in places})
    return _domains({p.chain[_INDEX[level]] for p in places})


def _domains(keys: set[str | None]) -> tuple[str, ...] | None:
    """Sorted distinct keys; None when one is unknown."""
    if None in keys:
        return None
    return tuple(sorted(cast("set[str]", keys)))


class FleetShapes:
    """Domain sizes of a fleet (GPUs of the models compared), worked out once and reused for every placement.

    ``fleet``: its GPUs' places, or their columns (:data:`SCHEMA`), in the fleet's order (a node's domain at a
    level is its last GPU's key there)."""

    def __init__(self, fleet: Sequence[GpuPlace] | pl.DataFrame) -> None:
        self._frame = fleet if isinstance(fleet, pl.DataFrame) else places_frame(fleet)
        self._largest: dict[str, int | None] = {}
        self._capacity: dict[tuple[str, int], list[int]] = {}
        self._reach: dict[tuple[str, int], list[int]] = {}
        self._per_node: pl.DataFrame | None = None

    def largest(self, level: str) -> int | None:
        """GPUs of the largest domain of an intra-node ``level``; None when no GPU has a key there."""
        if level not in self._largest:
            sizes = self._frame.filter(pl.col(level).is_not_null()).group_by(level).len()["len"]
            self._largest[level] = int(sizes.max()) if len(sizes) else None  # type: ignore[arg-type]
        return self._largest[level]

    def capacities(self, level: str, smallest: int) -> list[int]:
        """Pods of ``smallest`` GPUs each domain of ``level`` can hold (a pod never straddles nodes), largest first."""
        key = (level, smallest)
        if key not in self._capacity:
            if self._per_node is None:  # per node: its GPUs and its last GPU's key at every level
                self._per_node = self._frame.group_by("node", maintain_order=True).agg(
                    pl.len().alias("gpus"), *(pl.col(lvl).last().alias(f"key_{lvl}") for lvl in LEVELS))
            capacity = (self._per_node.filter(pl.col(f"key_{level}").is_not_null())
                        .group_by(f"key_{level}").agg((pl.col("gpus") // smallest).sum().alias("pods")))
            self._capacity[key] = sorted(capacity["pods"].to_list(), reverse=True)
        return self._capacity[key]

    def reach(self, level: str, smallest: int) -> list[int]:
        """Running totals of :meth:`capacities`: pods the k largest domains hold, k = 1, 2, ..."""
        key = (level, smallest)
        if key not in self._reach:
            self._reach[key] = list(accumulate(self.capacities(level, smallest)))
        return self._reach[key]


def min_domains(
    level: str, devices: int, pod_sizes: Sequence[int], fleet: Sequence[GpuPlace] | FleetShapes
) -> int | None:
    """Fewest domains of ``level`` (sizes taken from ``fleet``) that could hold the pods; None if unknown."""
    if devices <= 0 or not pod_sizes:
        return None
    shapes = fleet if isinstance(fleet, FleetShapes) else FleetShapes(fleet)
    return least_domains(level, devices, len(pod_sizes), min(pod_sizes), shapes)


def least_domains(level: str, devices: int, pods: int, smallest: int, shapes: FleetShapes) -> int | None:
    """:func:`min_domains` of ``devices`` GPUs in ``pods`` pods whose smallest holds ``smallest`` (pods >= 1)."""
    if level in INTRA_NODE:
        largest = shapes.largest(level)
        return None if largest is None else math.ceil(devices / largest)
    reach = shapes.reach(level, max(1, smallest))  # the largest domains first, until every pod fits
    used = bisect_left(reach, pods)
    if used == len(reach):
        return None  # the fleet as described cannot hold the workload at all: no claim
    return used + 1


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


def spread(
    places: Sequence[GpuPlace], pod_sizes: Sequence[int], fleet: Sequence[GpuPlace] | FleetShapes
) -> list[LevelSpread]:
    """Every level measured for this placement (levels with an unknown key are left out)."""
    if not isinstance(fleet, FleetShapes):
        fleet = FleetShapes(fleet)
    out = []
    columns = list(zip(*map(_CHAIN, places), strict=True)) if places else [() for _ in LEVELS]  # per level, C loops
    for level, column in zip(LEVELS, columns, strict=True):
        used = _domains(set(column)) if places else None
        if used is None:
            continue
        least = min_domains(level, len(places), pod_sizes, fleet)
        if least is None:
            continue
        out.append(LevelSpread(level, len(used), min(least, len(used)), used))
    return out
