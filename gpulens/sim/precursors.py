"""Degrading GPUs and healthy look-alikes: precursor counters, throttling and XID events in closed form.

A ``degradation`` fault grows its precursor from ``at`` (the onset) until the hard failure at
``at + fail_after``; a ``lookalike`` shows the same kind of signal on a healthy GPU without the growth.
Patterns follow the published ones (docs/simulator.md has the sources):

- ``ecc``: correctable ECC errors cluster and accelerate before an uncorrectable one (a correctable
  error makes the next one 13-90x likelier, Schroeder et al.); XID 92 (high single-bit rate) once the
  rate is high; fails with XID 48 (double-bit ECC). Look-alike: a constant, elevated correctable rate
  since the epoch (a stable weak cell, not a growing one).
- ``row_remap``: XID 63 row-remap events come closer and closer, correctable errors rise, until a
  remap fails: XID 64 and ``remapped_rows_failure`` (AWS replaces on XID 63 for this reason).
  Look-alike: a single XID 63.
- ``nvlink``: NVLink CRC errors rise until XID 74. Look-alike: one burst lasting ``duration``.
- ``pcie``: PCIe replays rise until the GPU falls off the bus (XID 79, down for ``duration``).
  Look-alike: a constant low replay rate since the epoch.
- ``thermal``: thermal throttling (with its clock and power drop) takes a growing share of each slot
  until XID 79. Look-alike: one throttling window of ``duration``.

Increments are drawn per 10-minute slot from counter-based noise (bursty: 0.2x to 1.8x the mean), so
any time can be evaluated alone and the counters never go down.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpulens.sim.noise import stable_key, unit_noise
from gpulens.sim.scenario import FaultKind, FaultSpec, Precursor

SLOT = 600.0
"""Seconds per precursor slot."""
DEFAULT_LEAD = 86400.0
"""Growth horizon of a degradation that has not failed yet (``fail_after`` unset)."""
_MAX_SLOTS = 60 * 144


@dataclass(frozen=True)
class Profile:
    """How one precursor grows: a per-hour rate (or a throttled share) from ``start`` to ``peak``."""

    counter: str | None
    """Which counter it drives: ``ecc`` (corrected ECC), ``nvlink`` (CRC), ``pcie`` (replays) or None."""
    start: float
    peak: float
    failure_xid: int
    warn_xid: int | None = None


PROFILES: dict[Precursor, Profile] = {
    Precursor.ECC: Profile("ecc", 4.0, 600.0, 48, warn_xid=92),
    Precursor.ROW_REMAP: Profile("ecc", 2.0, 80.0, 64, warn_xid=63),
    Precursor.NVLINK: Profile("nvlink", 3000.0, 2_000_000.0, 74),
    Precursor.PCIE: Profile("pcie", 40.0, 8000.0, 79),
    Precursor.THERMAL: Profile(None, 0.04, 0.7, 79),
}
LOOKALIKE_FACTOR = {Precursor.ECC: 3.0, Precursor.PCIE: 1.5, Precursor.NVLINK: 0.05}
"""Look-alike level: a multiple of ``start`` (ecc, pcie, flat) or of ``peak`` (nvlink burst)."""


def is_trend(fault: FaultSpec) -> bool:
    return fault.kind in (FaultKind.DEGRADATION, FaultKind.LOOKALIKE)


@dataclass(frozen=True)
class Trend:
    """One degradation or look-alike, evaluated at relative times (seconds since the epoch)."""

    fault: FaultSpec
    seed: int

    @property
    def profile(self) -> Profile:
        assert self.fault.precursor is not None
        return PROFILES[self.fault.precursor]

    @property
    def degrading(self) -> bool:
        return self.fault.kind is FaultKind.DEGRADATION

    @property
    def failure_rel(self) -> float | None:
        """When the hard failure happens (None: a look-alike, or not failed yet)."""
        if not self.degrading or self.fault.fail_after is None:
            return None
        return self.fault.at + self.fault.fail_after

    @property
    def origin(self) -> float:
        """Where the signal begins: the onset, or the epoch for a flat look-alike (a GPU that always ran so)."""
        f = self.fault
        flat = not self.degrading and f.precursor in (Precursor.ECC, Precursor.PCIE)
        return 0.0 if flat else f.at

    @property
    def _key(self) -> int:
        f = self.fault
        return stable_key(self.seed, "trend", f.node, f.gpu, f.at, str(f.precursor))

    def _slot_rates(self, n: int) -> np.ndarray:
        """Mean level in each of the first ``n`` slots after the onset."""
        p, f = self.profile, self.fault
        k = np.arange(n, dtype=np.float64)
        if self.degrading:
            lead = f.fail_after or DEFAULT_LEAD
            frac = np.clip(k * SLOT / lead, 0.0, 1.0)
            return p.start * (p.peak * f.intensity / p.start) ** frac
        assert f.precursor is not None
        if f.precursor is Precursor.NVLINK:
            return np.where(k * SLOT < f.duration, p.peak * LOOKALIKE_FACTOR[f.precursor] * f.intensity, 0.0)
        return np.full(n, p.start * LOOKALIKE_FACTOR.get(f.precursor, 1.0) * f.intensity)

    def _slots(self, rel: np.ndarray) -> tuple[np.ndarray, int]:
        """Slot index of each time (-1 before the onset) and the number of slots in play."""
        end = self.failure_rel
        last = float(np.max(rel)) if rel.size else self.origin
        if end is not None:
            last = min(last, end)
        n = int(np.clip(np.ceil((last - self.origin) / SLOT) + 1, 0, _MAX_SLOTS))
        idx = np.floor((rel - self.origin) / SLOT)
        return np.clip(idx, -1, n - 1).astype(np.int64), n

    def counter(self, rel: np.ndarray) -> np.ndarray:
        """Precursor counts added by time ``rel`` (int64, 0 before the onset, frozen after the failure)."""
        if self.profile.counter is None:
            return np.zeros(rel.shape, dtype=np.int64)
        idx, n = self._slots(rel)
        if n <= 0:
            return np.zeros(rel.shape, dtype=np.int64)
        slots = np.arange(n)
        burst = 0.2 + 1.6 * unit_noise(self._key, slots)
        dither = unit_noise(self._key ^ 0x51, slots)
        inc = np.floor(self._slot_rates(n) * SLOT / 3600.0 * burst + dither).astype(np.int64)
        cum = np.concatenate([[0], np.cumsum(inc)])
        return cum[idx + 1]

    def throttle(self, rel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(throttled now, thermal-violation seconds so far) for a thermal precursor; zeros otherwise."""
        zero = (np.zeros(rel.shape, dtype=bool), np.zeros(rel.shape))
        if self.fault.precursor is not Precursor.THERMAL:
            return zero
        f = self.fault
        if not self.degrading:
            inside = (rel >= f.at) & (rel < f.at + f.duration)
            return inside, np.clip(rel - f.at, 0.0, f.duration)
        idx, n = self._slots(rel)
        if n <= 0:
            return zero
        slots = np.arange(n)
        share = np.minimum(self._slot_rates(n) * (0.5 + unit_noise(self._key, slots)), 0.95) * SLOT
        cum = np.concatenate([[0.0], np.cumsum(share)])
        into = rel - (f.at + np.maximum(idx, 0) * SLOT)
        end = self.failure_rel
        live = (idx >= 0) & ((rel < end) if end is not None else True)
        this = share[np.maximum(idx, 0)]
        active = live & (into < this)
        seconds = np.where(idx >= 0, cum[np.maximum(idx, 0)] + np.minimum(np.maximum(into, 0.0), this), 0.0)
        return active, seconds

    def events(self) -> list[tuple[float, int]]:
        """Every XID event of this trend as (relative time, code), in time order."""
        f, p = self.fault, self.profile
        out: list[tuple[float, int]] = []
        if f.precursor is Precursor.ROW_REMAP:
            if self.degrading:
                lead = f.fail_after or DEFAULT_LEAD
                out += [(f.at + lead * (1 - (1 - i / 7) ** 2), 63) for i in range(1, 7)]
            else:
                out.append((f.at, 63))
        elif p.warn_xid is not None and self.degrading:
            lead = f.fail_after or DEFAULT_LEAD
            n = int(lead // SLOT)
            rates = self._slot_rates(n)
            hot = [k for k in range(n) if rates[k] >= 0.4 * p.peak * f.intensity and k % 6 == 0]
            out += [(f.at + k * SLOT + SLOT / 2, p.warn_xid) for k in hot]
        failure = self.failure_rel
        if failure is not None:
            out = [e for e in out if e[0] < failure] + [(failure, p.failure_xid)]
        return out

    def events_until(self, until: float) -> list[tuple[float, int]]:
        """Every XID event (one cycle only: ``until`` changes nothing)."""
        return self.events()

    def failures(self, rel: np.ndarray) -> np.ndarray:
        """Hard failures so far (0 or 1)."""
        return self.failed(rel).astype(np.int64)

    def down(self, rel: np.ndarray) -> np.ndarray:
        """Whether the GPU is off the bus (a failure by XID 79, for ``duration``)."""
        failure = self.failure_rel
        if failure is None or self.profile.failure_xid != 79:
            return np.zeros(rel.shape, dtype=bool)
        return (rel >= failure) & (rel < failure + self.fault.duration)

    def failed(self, rel: np.ndarray) -> np.ndarray:
        """Whether the hard failure has happened by ``rel``."""
        failure = self.failure_rel
        return np.zeros(rel.shape, dtype=bool) if failure is None else rel >= failure


@dataclass(frozen=True)
class RecurringTrend:
    """A degradation with ``every``: the GPU in that slot degrades and fails again each ``every`` after ``at``.

    Each cycle is a one-shot ``Trend`` (its own noise, onset ``at + n x every``); counters add up over the
    cycles and never go down, and the failed state lasts until the next onset (the part was replaced).
    """

    fault: FaultSpec
    seed: int

    @property
    def profile(self) -> Profile:
        return self.cycle(0).profile

    @property
    def every(self) -> float:
        assert self.fault.every is not None
        return self.fault.every

    def cycle(self, n: int) -> Trend:
        return Trend(self.fault.model_copy(update={"at": self.fault.at + n * self.every, "every": None}), self.seed)

    def _index(self, rel: np.ndarray) -> np.ndarray:
        """Cycle in play at each time (-1 before the first onset)."""
        return np.maximum(np.floor((rel - self.fault.at) / self.every), -1).astype(np.int64)

    def _range(self, rel: np.ndarray) -> range:
        if rel.size == 0:
            return range(0)
        idx = self._index(rel)
        return range(max(0, int(idx.min())), int(idx.max()) + 1)

    def counter(self, rel: np.ndarray) -> np.ndarray:
        if self.profile.counter is None or rel.size == 0:
            return np.zeros(rel.shape, dtype=np.int64)
        span = self._range(rel)
        base = sum(int(self.cycle(n).counter(np.array([self.fault.at + (n + 1) * self.every]))[0])
                   for n in range(span.start))
        out = np.full(rel.shape, base, dtype=np.int64)
        for n in span:
            out += self.cycle(n).counter(rel)
        return out

    def throttle(self, rel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        active = np.zeros(rel.shape, dtype=bool)
        seconds = np.zeros(rel.shape)
        if self.fault.precursor is not Precursor.THERMAL or rel.size == 0:
            return active, seconds
        span = self._range(rel)
        for n in range(span.start):
            seconds += self.cycle(n).throttle(np.array([self.fault.at + (n + 1) * self.every]))[1][0]
        for n in span:
            a, s = self.cycle(n).throttle(rel)
            active |= a
            seconds += s
        return active, seconds

    def events_until(self, until: float) -> list[tuple[float, int]]:
        """Every XID event of the cycles that began before ``until``, in time order."""
        out: list[tuple[float, int]] = []
        n = 0
        while self.fault.at + n * self.every < until:
            out += self.cycle(n).events()
            n += 1
        return out

    def down(self, rel: np.ndarray) -> np.ndarray:
        out = np.zeros(rel.shape, dtype=bool)
        for n in self._range(rel):
            out |= self.cycle(n).down(rel)
        return out

    def failed(self, rel: np.ndarray) -> np.ndarray:
        """Failed in the current cycle (a new cycle starts with a working part)."""
        idx = self._index(rel)
        failure = self.fault.at + idx * self.every + (self.fault.fail_after or 0.0)
        return (idx >= 0) & (rel >= failure)

    def failures(self, rel: np.ndarray) -> np.ndarray:
        """Hard failures so far (for counters such as double-bit ECC that add up over the cycles)."""
        return np.maximum(self._index(rel), 0) + self.failed(rel).astype(np.int64)


def trend_of(fault: FaultSpec, seed: int) -> Trend | RecurringTrend:
    """The one-shot or recurring trend of a degradation / look-alike fault."""
    return RecurringTrend(fault, seed) if fault.every is not None else Trend(fault, seed)
