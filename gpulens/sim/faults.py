"""Scheduled faults, evaluated in closed form at any time (counts since the fleet's epoch).

- XID 79 (GPU fell off the bus): the GPU is down (``up=False``, readings absent) for ``duration``.
- XID 48 (double-bit ECC): ``count`` uncorrected ECC errors per event (and retired pages pre-Hopper).
- XID 13 (graphics engine exception): an application error on one device; the GPU stays healthy.
- thermal: a throttling window of ``duration``: thermal clock-event reasons active, thermal-violation
  seconds rising, SM clocks and power down, temperature up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from gpulens.core.vocabulary import ThrottleReason
from gpulens.sim.scenario import FaultKind, FaultSpec

XID_CODE = {FaultKind.XID79: 79, FaultKind.XID48: 48, FaultKind.XID13: 13}
THERMAL_REASONS = (str(ThrottleReason.HW_THERMAL), str(ThrottleReason.SW_THERMAL))


@dataclass(frozen=True)
class Schedule:
    """When a fault happens, relative to the epoch: at ``at`` and every ``every`` after it."""

    at: float
    every: float | None
    duration: float

    @classmethod
    def of(cls, fault: FaultSpec) -> Schedule:
        return cls(fault.at, fault.every, fault.duration)

    def count(self, rel: np.ndarray) -> np.ndarray:
        """Occurrences with time <= ``rel`` (seconds since the epoch)."""
        if self.every is None:
            return (rel >= self.at).astype(np.int64)
        n = np.floor((rel - self.at) / self.every).astype(np.int64) + 1
        return np.maximum(n, 0)

    def last(self, rel: np.ndarray) -> np.ndarray:
        """Relative time of the last occurrence at or before ``rel`` (NaN before the first)."""
        n = self.count(rel)
        last = self.at + (n - 1) * (self.every or 0.0)
        return np.where(n > 0, last, np.nan)

    def active(self, rel: np.ndarray) -> np.ndarray:
        """Whether ``rel`` lies inside an occurrence's window [t_k, t_k + duration)."""
        last = self.last(rel)
        with np.errstate(invalid="ignore"):
            return (rel - last) < self.duration

    def covered_seconds(self, rel: np.ndarray) -> np.ndarray:
        """Seconds spent inside windows up to ``rel``."""
        n = self.count(rel)
        last = self.last(rel)
        partial = np.where(n > 0, np.minimum(self.duration, rel - np.nan_to_num(last)), 0.0)
        return np.maximum(n - 1, 0) * self.duration + partial

    def occurrences(self, start: float, end: float) -> list[float]:
        """Relative times of the occurrences in [start, end)."""
        if self.every is None:
            return [self.at] if start <= self.at < end else []
        k0 = max(0, int(np.ceil((start - self.at) / self.every)))
        out = []
        k = k0
        while (t := self.at + k * self.every) < end:
            if t >= start:
                out.append(t)
            k += 1
        return out


def faults_on(faults: Iterable[FaultSpec], node: str, gpu: int) -> list[FaultSpec]:
    return [f for f in faults if f.node == node and f.gpu == gpu]
