"""Workload archetypes as pure, vectorized functions of time: presence, activity and memory of each holding.

- training: high activity (about 0.9) with short checkpoint dips every two hours; memory 85-95 %.
- inference: a daily load cycle peaking mid-afternoon UTC, low activity (at most about 0.3) while
  holding 80-92 % of the memory (a pre-allocated KV cache).
- notebook: mostly idle (about 0.5 %); bursts in 15-minute slots during weekday working hours.
- batch: pods exist in a time slot or not (decided per slot); a running pod is busy; it goes away at
  the end of its slot and a new pod (new name and uid) may take the device in the next slot.

Per-pod levels come from the seed, per-minute jitter from counter-based noise, so the value at ``t``
never depends on which other times are evaluated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpulens.sim.noise import centered_noise, stable_unit, unit_noise
from gpulens.sim.plan import NodePlan, PodPlan
from gpulens.sim.scenario import Archetype

MIB = 1024 * 1024
DAY = 86400.0
NOISE_SLOT = 60.0
CHECKPOINT_EVERY = 7200.0
CHECKPOINT_SECONDS = 240.0
CHECKPOINT_ACTIVITY = 0.12
NOTEBOOK_SLOT = 900.0
NOTEBOOK_BURST_PROBABILITY = 0.2
NOTEBOOK_IDLE = 0.005
WORK_HOURS = (8.0, 18.0)
INFERENCE_PEAK_HOUR = 15.0


@dataclass(frozen=True)
class PodLevels:
    """Per-pod constants drawn from the seed."""

    busy: float
    low: float
    memory_fraction: float
    phase: float
    """Seconds: shifts checkpoints and the daily peak between pods."""


def pod_levels(seed: int, pod: PodPlan) -> PodLevels:
    w = pod.workload
    u = [stable_unit(seed, "levels", pod.key, i) for i in range(4)]
    a = pod.archetype
    if a is Archetype.TRAINING:
        return PodLevels(w.activity or 0.86 + 0.1 * u[0], CHECKPOINT_ACTIVITY, w.memory_fraction or 0.85 + 0.1 * u[1],
                         u[2] * CHECKPOINT_EVERY)
    if a is Archetype.INFERENCE:
        return PodLevels(w.activity or 0.22 + 0.12 * u[0], 0.02 + 0.04 * u[3], w.memory_fraction or 0.8 + 0.12 * u[1],
                         (u[2] - 0.5) * 3 * 3600.0)
    if a is Archetype.NOTEBOOK:
        return PodLevels(w.activity or 0.25 + 0.3 * u[0], NOTEBOOK_IDLE, w.memory_fraction or 0.1 + 0.35 * u[1], 0.0)
    return PodLevels(w.activity or 0.65 + 0.25 * u[0], 0.0, w.memory_fraction or 0.4 + 0.3 * u[1], 0.0)


def batch_slots(pod: PodPlan, t: np.ndarray) -> np.ndarray:
    """Time-slot number of a batch pod at each time."""
    return np.floor(t / pod.workload.slot_seconds).astype(np.int64)


def pod_present(seed: int, pod: PodPlan, t: np.ndarray) -> np.ndarray:
    """Whether the pod exists at each time (always, except batch pods outside their running slots)."""
    if pod.archetype is not Archetype.BATCH:
        return np.ones(t.shape, dtype=bool)
    return unit_noise(pod.key, batch_slots(pod, t)) < pod.workload.duty


def _daily_load(t: np.ndarray, phase: np.ndarray) -> np.ndarray:
    return 0.5 + 0.5 * np.cos(2 * math.pi * (t - INFERENCE_PEAK_HOUR * 3600.0 - phase) / DAY)


def _work_hours(t: np.ndarray) -> np.ndarray:
    days = np.floor(t / DAY)
    weekday = (days + 3) % 7  # 1970-01-01 was a Thursday; Monday = 0
    hour = (t - days * DAY) / 3600.0
    return (weekday < 5) & (hour >= WORK_HOURS[0]) & (hour < WORK_HOURS[1])


ARCHETYPE_CODES = {a: i for i, a in enumerate(Archetype)}


@dataclass(frozen=True)
class HoldingTable:
    """Per-holding constants of one node as arrays (rows follow ``NodePlan.holdings``); built once per node.

    Column arrays have shape (H, 1) so that they broadcast against a row of times.
    """

    pod: np.ndarray
    archetype: np.ndarray
    key: np.ndarray
    pod_key: np.ndarray
    busy: np.ndarray
    low: np.ndarray
    memory_fraction: np.ndarray
    phase: np.ndarray
    slot_seconds: np.ndarray
    duty: np.ndarray
    capacity_mib: np.ndarray
    device: np.ndarray
    gpu: np.ndarray
    gi_first: np.ndarray

    def rows(self, archetype: Archetype) -> np.ndarray:
        return np.nonzero(self.archetype == ARCHETYPE_CODES[archetype])[0]


def holding_table(seed: int, node: NodePlan) -> HoldingTable:
    """The constants of every holding of ``node``."""
    cols: dict[str, list[float]] = {k: [] for k in (
        "pod", "archetype", "busy", "low", "memory_fraction", "phase", "slot_seconds", "duty", "capacity_mib",
        "device", "gpu", "gi_first")}
    keys: list[int] = []
    pod_keys: list[int] = []
    levels = {p.index: pod_levels(seed, p) for p in node.pods}
    for h in node.holdings:
        pod = node.pods[h.pod]
        d = node.devices[h.device]
        lv = levels[pod.index]
        batch = pod.archetype is Archetype.BATCH
        values = {
            "pod": pod.index, "archetype": ARCHETYPE_CODES[pod.archetype], "busy": lv.busy, "low": lv.low,
            "memory_fraction": lv.memory_fraction, "phase": lv.phase,
            "slot_seconds": pod.workload.slot_seconds if batch else 1.0, "duty": pod.workload.duty if batch else 1.0,
            "capacity_mib": d.memory_total_bytes * d.memory_share / d.replicas / MIB,
            "device": d.index,
            "gpu": d.gpu_index, "gi_first": d.gi_first,
        }
        for k, v in values.items():
            cols[k].append(v)
        keys.append(h.key)
        pod_keys.append(pod.key)
    ints = ("pod", "archetype", "device", "gpu", "gi_first")
    arrays = {k: (np.array(v, dtype=np.int64) if k in ints else np.array(v, dtype=np.float64).reshape(-1, 1))
              for k, v in cols.items()}
    return HoldingTable(
        key=np.array(keys, dtype=np.uint64).reshape(-1, 1), pod_key=np.array(pod_keys, dtype=np.uint64).reshape(-1, 1),
        **arrays,
    )


def table_slots(tab: HoldingTable, t: np.ndarray) -> np.ndarray:
    """(H, T) slot numbers (meaningful for batch rows only)."""
    return np.floor(t[None, :] / tab.slot_seconds).astype(np.int64)


def table_present(tab: HoldingTable, t: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """(H, T) whether each holding's pod exists (same rule as ``pod_present``)."""
    present = np.ones(slots.shape, dtype=bool)
    rows = tab.rows(Archetype.BATCH)
    if len(rows):
        present[rows] = unit_noise(tab.pod_key[rows], slots[rows]) < tab.duty[rows]
    return present


def table_activity(tab: HoldingTable, t: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """(H, T) activity 0..1 of each holding (rounded to 1e-4), ignoring presence."""
    minute = np.floor(t / NOISE_SLOT).astype(np.int64)[None, :]
    jitter = centered_noise(tab.key, minute)
    act = np.zeros(jitter.shape)
    r = tab.rows(Archetype.TRAINING)
    if len(r):
        dip = ((t[None, :] - tab.phase[r]) % CHECKPOINT_EVERY) < CHECKPOINT_SECONDS
        act[r] = np.where(dip, tab.low[r] + 0.03 * jitter[r], tab.busy[r] + 0.04 * jitter[r])
    r = tab.rows(Archetype.INFERENCE)
    if len(r):
        act[r] = tab.low[r] + (tab.busy[r] - tab.low[r]) * _daily_load(t[None, :], tab.phase[r]) + 0.03 * jitter[r]
    r = tab.rows(Archetype.NOTEBOOK)
    if len(r):
        slot = np.floor(t / NOTEBOOK_SLOT).astype(np.int64)[None, :]
        burst = _work_hours(t)[None, :] & (unit_noise(tab.pod_key[r] ^ np.uint64(0xB0B), slot) < NOTEBOOK_BURST_PROBABILITY)
        act[r] = np.where(burst, tab.busy[r] + 0.1 * jitter[r], tab.low[r] + 0.005 * jitter[r])
    r = tab.rows(Archetype.BATCH)
    if len(r):
        act[r] = tab.busy[r] + 0.08 * jitter[r]
    return np.round(np.clip(act, 0.0, 1.0), 4)


def table_memory(tab: HoldingTable, t: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """(H, T) memory in bytes (whole MiB) of each holding, ignoring presence."""
    minute = np.floor(t / NOISE_SLOT).astype(np.int64)[None, :]
    frac = tab.memory_fraction + 0.005 * centered_noise(tab.key ^ np.uint64(0x3E3), minute)
    r = tab.rows(Archetype.BATCH)
    if len(r):
        frac[r] = frac[r] + 0.1 * centered_noise(tab.pod_key[r] ^ np.uint64(0x51), slots[r])
    frac = np.clip(frac, 0.01, 0.97)
    return (np.floor(frac * tab.capacity_mib) * MIB).astype(np.int64)
