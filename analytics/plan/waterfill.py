"""Weighted max-min fair shares of one integer capacity by water-filling (a divisor method, exact and monotone).

Each claimant has a floor ``lo``, a ceiling ``hi`` and a weight ``w``. At water level ``t`` a claimant
holds ``clamp(floor(w * t), lo, hi)`` units; the level rises until the capacity is used or every
claimant sits at its ceiling. Equivalently: starting from the floors, units go one at a time to the
claimant whose next unit has the lowest level ``(x + 1) / w`` (ties: the smaller key), which is the
D'Hondt / Jefferson divisor method. The sequence of units does not depend on the capacity, so more
capacity never lowers anyone's share (no Alabama paradox), and the same input gives the same output.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Claim:
    """One claimant of a capacity: floor and ceiling in units, weight > 0, a key that breaks ties."""

    key: str
    lo: int
    hi: int
    weight: float = 1.0


class InfeasibleFloors(ValueError):
    """The floors alone exceed the capacity."""

    def __init__(self, floors: int, capacity: int) -> None:
        super().__init__(f"floors add up to {floors}, capacity is {capacity}")
        self.floors = floors
        self.capacity = capacity


def _held(lo: np.ndarray, hi: np.ndarray, w: np.ndarray, t: float) -> np.ndarray:
    return np.clip(np.floor(w * t), lo, hi)


def water_fill(claims: Sequence[Claim], capacity: int) -> list[int]:
    """Shares of ``capacity`` in the order of ``claims``; raises ``InfeasibleFloors`` when floors do not fit."""
    if not claims:
        return []
    lo = np.array([c.lo for c in claims], dtype=np.float64)
    hi = np.maximum(np.array([c.hi for c in claims], dtype=np.float64), lo)
    w = np.array([c.weight for c in claims], dtype=np.float64)
    if np.any(w <= 0) or not np.all(np.isfinite(w)):
        raise ValueError("weights must be positive and finite")
    floors = int(lo.sum())
    if floors > capacity:
        raise InfeasibleFloors(floors, capacity)
    if hi.sum() <= capacity:
        return [int(x) for x in hi]
    # Bisection on the level over a fixed grid: the result is the largest grid level whose holdings fit.
    t_lo, t_hi = 0.0, float(np.max((hi + 1) / w))
    for _ in range(64):
        mid = (t_lo + t_hi) / 2
        if mid in (t_lo, t_hi):
            break
        if _held(lo, hi, w, mid).sum() <= capacity:
            t_lo = mid
        else:
            t_hi = mid
    x = _held(lo, hi, w, t_lo)
    left = capacity - int(x.sum())
    # The remaining units (fewer than the units between the two grid levels) go by next level, then key.
    order = sorted(range(len(claims)), key=lambda i: claims[i].key)
    rank = {i: r for r, i in enumerate(order)}
    heap = [((x[i] + 1) / w[i], rank[i], i) for i in range(len(claims)) if x[i] < hi[i]]
    heapq.heapify(heap)
    while left > 0 and heap:
        _, r, i = heapq.heappop(heap)
        x[i] += 1
        left -= 1
        if x[i] < hi[i]:
            heapq.heappush(heap, ((x[i] + 1) / w[i], r, i))
    return [int(v) for v in x]
