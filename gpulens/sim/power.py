"""Power of simulated GPUs, one reading per UTC minute, and the energy counter that integrates exactly that power.

The power gauge of a GPU is constant within each UTC minute: the power model (idle + span x
compute-weighted activity + a few watts of per-minute noise, capped while thermally throttled)
evaluated at the minute's first second, rounded to 0.01 W as reported. The energy counter is the
exact integral of that reported power since the scenario's epoch, over the time the GPU is up (a GPU
that fell off the bus reports no power and adds no energy), so over any window
``(energy(t2) - energy(t1)) / (t2 - t1)`` is the time-weighted mean of the gauge.

``PowerLedger`` keeps, per node, each day's per-minute power and cumulative joules (a few days, least
recently used) and the energy at the start of every day since the epoch (one small vector per day),
so a live read or a day of backfill evaluates at most the days it touches, and the first read far from
the epoch evaluates every day before it once. Each day is always computed by the same call with the
same shape, so every path (snapshot, history, any order) reads the same numbers.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from gpulens.sim.constants import NodeConstants
from gpulens.sim.faults import Schedule, faults_on
from gpulens.sim.noise import centered_noise
from gpulens.sim.plan import NodePlan
from gpulens.sim.scenario import FaultKind, Scenario
from gpulens.sim.workloads import NOISE_SLOT, table_activity, table_present, table_slots

MINUTE = NOISE_SLOT
DAY = 86400.0
MINUTES_PER_DAY = int(DAY // MINUTE)
DAYS_CACHED = 8
"""Full days (per-minute power and joules) kept per node; day-start energies are kept for every day."""
ENERGY_DECIMALS = 3
"""The counter is reported in whole millijoules, as NVML's total energy consumption."""


@dataclass(frozen=True)
class Hardware:
    idle_watts: float
    peak_watts: float
    idle_celsius: float
    peak_celsius: float
    idle_sm_mhz: float
    max_sm_mhz: float
    memory_mhz: float
    has_retired_pages: bool


HARDWARE = {
    "H100": Hardware(70.0, 630.0, 41.0, 64.0, 345.0, 1980.0, 2619.0, False),
    "H200": Hardware(78.0, 650.0, 28.0, 58.0, 345.0, 1980.0, 3201.0, False),
    "A100": Hardware(60.0, 380.0, 33.0, 62.0, 210.0, 1410.0, 1593.0, True),
}
THERMAL_POWER_FACTOR = 0.6
NOISE_WATTS = 4.0


def sum_rows(values: np.ndarray, index: np.ndarray, n: int) -> np.ndarray:
    """Row sums into ``n`` groups, in row order (the same result whatever the number of columns).

    One vector add per row: the order of ``np.add.at`` (so the same floats), many times faster on long rows.
    """
    out = np.zeros((n, values.shape[1]), dtype=values.dtype)
    if values.shape[1] < 8:
        np.add.at(out, index, values)
    else:
        for row, group in enumerate(index.tolist()):
            out[group] += values[row]
    return out


@dataclass(frozen=True)
class Load:
    """What the holdings of a node do at times ``t``: (H, T) per holding, (D, T) per device, (G, T) per GPU."""

    slots: np.ndarray
    present: np.ndarray
    hold_activity: np.ndarray
    dev_busy: np.ndarray
    gpu_true: np.ndarray
    """Compute-weighted activity of each GPU, 0..1 (unrounded: what power and heat follow)."""


def node_load(node: NodePlan, c: NodeConstants, t: np.ndarray) -> Load:
    """Presence and activity of every holding, device and GPU of ``node`` at times ``t``."""
    tab = c.holdings
    slots = table_slots(tab, t)
    present = table_present(tab, t, slots)
    hold_act = np.where(present, table_activity(tab, t, slots), 0.0)
    dev_busy = np.round(np.minimum(sum_rows(hold_act, tab.device, len(node.devices)), 1.0), 4)
    gpu_true = np.minimum(sum_rows(c.device_share * dev_busy, c.device_gpu, len(node.gpus)), 1.0)
    return Load(slots=slots, present=present, hold_activity=hold_act, dev_busy=dev_busy, gpu_true=gpu_true)


def thermal_throttled(s: Scenario, node: NodePlan, rel: np.ndarray) -> np.ndarray:
    """(G, T) whether each GPU is inside a thermal-throttling window at ``rel`` (seconds since the epoch)."""
    out = np.zeros((len(node.gpus), rel.shape[0]), dtype=bool)
    for g in node.gpus:
        for f in faults_on(s.faults, node.name, g.index):
            if f.kind is FaultKind.THERMAL:
                out[g.index] |= Schedule.of(f).active(rel)
    return out


def down_seconds(s: Scenario, node: NodePlan, rel: np.ndarray) -> np.ndarray:
    """(G, T) seconds each GPU spent off the bus (XID 79 windows) up to ``rel``."""
    out = np.zeros((len(node.gpus), rel.shape[0]))
    for g in node.gpus:
        for f in faults_on(s.faults, node.name, g.index):
            if f.kind is FaultKind.XID79:
                out[g.index] += Schedule.of(f).covered_seconds(rel)
    return out


def model_power(hw: Hardware, gpu_key: np.ndarray, gpu_true: np.ndarray, throttled: np.ndarray,
                t: np.ndarray) -> np.ndarray:
    """(G, T) unrounded watts of the power model at times ``t`` (the minute's noise, the thermal cap)."""
    minute = np.floor(t / MINUTE).astype(np.int64)[None, :]
    p = hw.idle_watts + (hw.peak_watts - hw.idle_watts) * gpu_true + NOISE_WATTS * centered_noise(gpu_key, minute)
    return np.where(throttled, np.minimum(p, THERMAL_POWER_FACTOR * hw.peak_watts), p)


@dataclass(frozen=True)
class _Day:
    power: np.ndarray  # (G, 1440) reported watts of each minute of the day
    up: np.ndarray  # (G, 1440) seconds of each minute the GPU was up
    joules: np.ndarray  # (G, 1441) energy from the day's start to each minute's start (up time only)

    @property
    def total(self) -> np.ndarray:
        return self.joules[:, -1]


class PowerLedger:
    """The power gauge and energy counter of one simulated node at any times (see the module docstring)."""

    def __init__(self, s: Scenario, node: NodePlan, constants: NodeConstants) -> None:
        self.scenario = s
        self.node = node
        self.constants = constants
        self.hw = HARDWARE[node.model.short_name]
        self._first_day = int(np.floor(s.epoch_seconds / DAY))
        self._days: OrderedDict[int, _Day] = OrderedDict()
        self._day_start: dict[int, np.ndarray] = {self._first_day: np.zeros(len(node.gpus))}
        self._lock = threading.Lock()
        self._at_epoch: np.ndarray | None = None

    def read(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(power, energy), each (G, T): the minute's reported watts, and joules since the epoch (0 before it).

        Neither is masked for a GPU that is down (the caller reports both as absent then).
        """
        t = np.asarray(t, dtype=np.float64).reshape(-1)
        epoch = self.scenario.epoch_seconds
        with self._lock:
            if self._at_epoch is None:
                self._at_epoch = self._joules(np.array([epoch]))[:, 0]
            power = self._power(t)
            since = self._joules(np.maximum(t, epoch))
        return power, np.round(since - self._at_epoch[:, None], ENERGY_DECIMALS)

    def _by_day(self, t: np.ndarray) -> list[tuple[int, np.ndarray, np.ndarray, _Day]]:
        """For each day among ``t``: (day, columns of ``t`` in it, minute of the day of each, the day's arrays)."""
        days = np.floor(t / DAY).astype(np.int64)
        out = []
        for d in np.unique(days):
            cols = np.nonzero(days == d)[0]
            k = np.minimum(np.floor((t[cols] - float(d) * DAY) / MINUTE).astype(np.int64), MINUTES_PER_DAY - 1)
            out.append((int(d), cols, k, self._day(int(d))))
        return out

    def _power(self, t: np.ndarray) -> np.ndarray:
        power = np.empty((len(self.node.gpus), t.shape[0]))
        for _, cols, k, day in self._by_day(t):
            power[:, cols] = day.power[:, k]
        return power

    def _joules(self, t: np.ndarray) -> np.ndarray:
        """(G, T) joules from the first day's start to each time: the day's start, its whole minutes, the partial one.

        Each term is bounded by the next whole-minute value, so the result never decreases with ``t``.
        """
        joules = np.empty((len(self.node.gpus), t.shape[0]))
        for d, cols, k, day in self._by_day(t):
            minute_start = float(d) * DAY + k * MINUTE
            up = np.minimum(self._up_seconds(minute_start, t[cols]), day.up[:, k])
            joules[:, cols] = self._day_start_energy(d)[:, None] + (day.joules[:, k] + day.power[:, k] * up)
        return joules

    def _up_seconds(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(G, T) seconds each GPU was up between ``a`` and ``b`` (elementwise, ``a <= b``)."""
        rel_a, rel_b = a - self.scenario.epoch_seconds, b - self.scenario.epoch_seconds
        down = down_seconds(self.scenario, self.node, rel_b) - down_seconds(self.scenario, self.node, rel_a)
        return np.clip((b - a)[None, :] - down, 0.0, (b - a)[None, :])

    def _day_start_energy(self, d: int) -> np.ndarray:
        """Joules from the first day's start to day ``d``'s start (every day before it computed once)."""
        if d <= self._first_day:
            return self._day_start[self._first_day]
        known = max(k for k in self._day_start if k <= d)
        energy = self._day_start[known]
        for day in range(known, d):
            energy = energy + self._compute_day(day).total
            self._day_start[day + 1] = energy
        return energy

    def _day(self, d: int) -> _Day:
        found = self._days.get(d)
        if found is None:
            found = self._days[d] = self._compute_day(d)
            while len(self._days) > DAYS_CACHED:
                self._days.popitem(last=False)
        else:
            self._days.move_to_end(d)
        return found

    def _compute_day(self, d: int) -> _Day:
        """Per-minute power and cumulative joules of day ``d`` (always the same call, so always the same numbers)."""
        cached = self._days.get(d)
        if cached is not None:
            return cached
        s, node, c = self.scenario, self.node, self.constants
        t = float(d) * DAY + np.arange(MINUTES_PER_DAY, dtype=np.float64) * MINUTE
        rel = t - s.epoch_seconds
        load = node_load(node, c, t)
        power = np.round(model_power(self.hw, c.gpu_key, load.gpu_true, thermal_throttled(s, node, rel), t), 2)
        up = self._up_seconds(t, t + MINUTE)
        joules = np.zeros((len(node.gpus), MINUTES_PER_DAY + 1))
        np.cumsum(power * up, axis=1, out=joules[:, 1:])
        return _Day(power=power, up=up, joules=joules)
