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

from exporter.sim.noise import centered_noise, stable_unit, unit_noise
from exporter.sim.plan import DevicePlan, HoldingPlan, PodPlan
from exporter.sim.scenario import Archetype

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


def _daily_load(t: np.ndarray, phase: float) -> np.ndarray:
    return 0.5 + 0.5 * np.cos(2 * math.pi * (t - INFERENCE_PEAK_HOUR * 3600.0 - phase) / DAY)


def _work_hours(t: np.ndarray) -> np.ndarray:
    days = np.floor(t / DAY)
    weekday = (days + 3) % 7  # 1970-01-01 was a Thursday; Monday = 0
    hour = (t - days * DAY) / 3600.0
    return (weekday < 5) & (hour >= WORK_HOURS[0]) & (hour < WORK_HOURS[1])


def holding_activity(seed: int, pod: PodPlan, holding: HoldingPlan, levels: PodLevels, t: np.ndarray) -> np.ndarray:
    """Activity 0..1 of one holding (rounded to 1e-4), whether or not the hardware can report it."""
    minute = np.floor(t / NOISE_SLOT).astype(np.int64)
    jitter = centered_noise(holding.key, minute)
    a = pod.archetype
    if a is Archetype.TRAINING:
        dip = ((t - levels.phase) % CHECKPOINT_EVERY) < CHECKPOINT_SECONDS
        act = np.where(dip, levels.low + 0.03 * jitter, levels.busy + 0.04 * jitter)
    elif a is Archetype.INFERENCE:
        act = levels.low + (levels.busy - levels.low) * _daily_load(t, levels.phase) + 0.03 * jitter
    elif a is Archetype.NOTEBOOK:
        slot = np.floor(t / NOTEBOOK_SLOT).astype(np.int64)
        burst = _work_hours(t) & (unit_noise(pod.key ^ 0xB0B, slot) < NOTEBOOK_BURST_PROBABILITY)
        act = np.where(burst, levels.busy + 0.1 * jitter, levels.low + 0.005 * jitter)
    else:
        act = levels.busy + 0.08 * jitter
    return np.round(np.clip(act, 0.0, 1.0), 4)


def holding_memory(
    seed: int, pod: PodPlan, holding: HoldingPlan, device: DevicePlan, levels: PodLevels, t: np.ndarray
) -> np.ndarray:
    """Memory in bytes (whole MiB) one holding uses on its device."""
    capacity = device.memory_total_bytes * device.memory_share / device.replicas
    minute = np.floor(t / NOISE_SLOT).astype(np.int64)
    frac = levels.memory_fraction + 0.005 * centered_noise(holding.key ^ 0x3E3, minute)
    if pod.archetype is Archetype.BATCH:
        frac = frac + 0.1 * centered_noise(pod.key ^ 0x51, batch_slots(pod, t))
    frac = np.clip(frac, 0.01, 0.97)
    return (np.floor(frac * (capacity / MIB)) * MIB).astype(np.int64)


def expected_activity(pod: PodPlan, levels: PodLevels) -> float:
    """Long-run mean activity of a holding (without the inference daily cycle, see ``activity_integral``)."""
    a = pod.archetype
    if a is Archetype.TRAINING:
        f = CHECKPOINT_SECONDS / CHECKPOINT_EVERY
        return levels.busy * (1 - f) + levels.low * f
    if a is Archetype.INFERENCE:
        return levels.low + (levels.busy - levels.low) * 0.5
    if a is Archetype.NOTEBOOK:
        work = 5 / 7 * (WORK_HOURS[1] - WORK_HOURS[0]) / 24
        p = work * NOTEBOOK_BURST_PROBABILITY
        return levels.busy * p + levels.low * (1 - p)
    return levels.busy * pod.workload.duty


def activity_integral(pod: PodPlan, levels: PodLevels, t0: float, t: np.ndarray) -> np.ndarray:
    """Integral of the expected activity from ``t0`` to ``t`` (activity-seconds), in closed form."""
    span = np.maximum(t - t0, 0.0)
    base = expected_activity(pod, levels) * span
    if pod.archetype is not Archetype.INFERENCE:
        return base
    omega = 2 * math.pi / DAY
    shift = INFERENCE_PEAK_HOUR * 3600.0 + levels.phase
    end = np.maximum(t, t0)
    wave = (np.sin(omega * (end - shift)) - math.sin(omega * (t0 - shift))) / omega
    return base + (levels.busy - levels.low) * 0.5 * wave
