"""Everything one simulated node reports, as numpy arrays over a vector of times.

Both ``SimulatedFleet.node_snapshot`` (one time) and ``SimulatedFleet.history`` (many times) use this
one function, so history at ``t`` is the snapshot at ``t`` by construction. Physical calibration (idle
and loaded power, temperatures, clocks) follows the nvidia-smi captures of H100 and H200 on driver 590
(H100: 70 W / 41 C idle, 630 W / 63 C under gpu-burn, SM 345 -> 1980 MHz, memory 2619 MHz; H200: 78 W
/ 28 C idle, memory 3201 MHz) and the A100-SXM4-80GB data sheet (400 W, SM up to 1410 MHz, memory
1593 MHz).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from exporter.model import SharingMode
from exporter.sim.faults import XID_CODE, Schedule, faults_on
from exporter.sim.noise import centered_noise, stable_key, stable_unit
from exporter.sim.plan import NodePlan
from exporter.sim.scenario import FaultKind, Scenario
from exporter.sim.workloads import (
    NOISE_SLOT,
    activity_integral,
    batch_slots,
    holding_activity,
    holding_memory,
    pod_levels,
    pod_present,
)

MHZ = 1e6
MIB = 1024 * 1024


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
THERMAL_CELSIUS = 88.0
THERMAL_CLOCK_FACTOR = 0.55
THERMAL_POWER_FACTOR = 0.6
BUSY_THRESHOLD = 0.01
"""Below this GPU activity the SM clock drops to its idle value."""
GI_BASE_MIB = {1: 9, 2: 17, 3: 22, 4: 30, 7: 55}
GPU_BASE_MIB = 55


@dataclass(frozen=True)
class NodeArrays:
    """Readings of one node over times ``t`` (shape T). Rows follow the plan's pods/holdings/devices/GPUs."""

    t: np.ndarray
    pod_present: np.ndarray  # (P, T) bool
    pod_slot: np.ndarray  # (P, T) int64, -1 for pods without slots
    hold_activity: np.ndarray  # (H, T) float
    hold_memory: np.ndarray  # (H, T) int64 bytes (0 when absent)
    dev_activity: np.ndarray  # (D, T) float; NaN where not measurable or GPU down
    dev_memory: np.ndarray  # (D, T) int64: memory of the device's GPU instance (or GPU)
    gpu_up: np.ndarray  # (G, T) bool
    gpu_activity: np.ndarray  # (G, T) float; NaN where not reported
    gpu_memory: np.ndarray  # (G, T) int64
    power: np.ndarray  # (G, T) float; NaN while down (as all physical readings below)
    energy: np.ndarray
    temperature: np.ndarray
    sm_clock: np.ndarray
    memory_clock: np.ndarray
    throttled: np.ndarray  # (G, T) bool
    thermal_seconds: np.ndarray
    ecc_corrected: np.ndarray  # (G, T) int64
    ecc_uncorrected: np.ndarray
    retired_pages: np.ndarray | None  # (G, T) int64, None when the model has no page retirement
    xid_counts: dict[int, np.ndarray]  # code -> (G, T) int64 (rows of GPUs without that fault are 0)
    xid_last: dict[int, np.ndarray]  # code -> (G, T) absolute seconds, NaN before the first
    xid_gpus: dict[int, frozenset[int]]
    """Which GPU indexes have a scheduled fault of each code (others do not report that code)."""


def evaluate(s: Scenario, node: NodePlan, t_in: np.ndarray | list[float]) -> NodeArrays:
    """Evaluate every reading of ``node`` at the times ``t`` (float Unix seconds)."""
    t = np.asarray(t_in, dtype=np.float64).reshape(-1)
    seed = s.seed
    n_t = t.shape[0]
    hw = HARDWARE[node.model.short_name]
    hopper = node.model.has_gpm
    mig = node.pool.sharing is SharingMode.MIG
    rel = t - s.epoch_seconds

    n_p, n_h, n_d, n_g = len(node.pods), len(node.holdings), len(node.devices), len(node.gpus)
    pod_pres = np.zeros((n_p, n_t), dtype=bool)
    pod_slot = np.full((n_p, n_t), -1, dtype=np.int64)
    hold_act = np.zeros((n_h, n_t))
    hold_mem = np.zeros((n_h, n_t), dtype=np.int64)
    dev_busy: np.ndarray = np.zeros((n_d, n_t))
    gi_mem = np.zeros((n_d, n_t), dtype=np.int64)  # indexed by the GI's first device
    expected_integral = np.zeros((n_g, n_t))
    for pod in node.pods:
        levels = pod_levels(seed, pod)
        present = pod_present(seed, pod, t)
        pod_pres[pod.index] = present
        if pod.archetype == "batch":
            pod_slot[pod.index] = batch_slots(pod, t)
        for h_index in pod.holdings:
            h = node.holdings[h_index]
            dev = node.devices[h.device]
            act = np.where(present, holding_activity(seed, pod, h, levels, t), 0.0)
            mem = np.where(present, holding_memory(seed, pod, h, dev, levels, t), 0)
            hold_act[h_index] = act
            hold_mem[h_index] = mem
            dev_busy[h.device] += act
            gi_mem[dev.gi_first] += mem
            expected_integral[dev.gpu_index] += dev.compute_share * activity_integral(
                pod, levels, s.epoch_seconds, t
            ) / dev.replicas
    dev_busy = np.round(np.minimum(dev_busy, 1.0), 4)

    # Faults per GPU.
    gpu_up = np.ones((n_g, n_t), dtype=bool)
    throttled = np.zeros((n_g, n_t), dtype=bool)
    thermal_seconds = np.zeros((n_g, n_t))
    ecc_unc = np.zeros((n_g, n_t), dtype=np.int64)
    xid_counts: dict[int, np.ndarray] = {}
    xid_last: dict[int, np.ndarray] = {}
    xid_gpus: dict[int, set[int]] = {}
    for g in node.gpus:
        for f in faults_on(s.faults, node.name, g.index):
            sched = Schedule.of(f)
            if f.kind is FaultKind.THERMAL:
                throttled[g.index] |= sched.active(rel)
                thermal_seconds[g.index] += sched.covered_seconds(rel)
                continue
            code = XID_CODE[f.kind]
            counts = xid_counts.setdefault(code, np.zeros((n_g, n_t), dtype=np.int64))
            last = xid_last.setdefault(code, np.full((n_g, n_t), np.nan))
            xid_gpus.setdefault(code, set()).add(g.index)
            n = sched.count(rel)
            counts[g.index] += n
            last[g.index] = np.fmax(last[g.index], sched.last(rel) + s.epoch_seconds)
            if f.kind is FaultKind.XID79:
                gpu_up[g.index] &= ~sched.active(rel)
            elif f.kind is FaultKind.XID48:
                ecc_unc[g.index] += n * f.count

    # Devices and GPUs.
    dev_activity = dev_busy.copy()
    dev_memory = np.zeros((n_d, n_t), dtype=np.int64)
    gpu_true = np.zeros((n_g, n_t))
    gpu_memory = np.zeros((n_g, n_t), dtype=np.int64)
    for d in node.devices:
        base = GI_BASE_MIB.get(d.slices or 7, GPU_BASE_MIB) if d.kind == "mig" else GPU_BASE_MIB
        dev_memory[d.index] = np.minimum(gi_mem[d.gi_first] + base * MIB, d.memory_total_bytes)
        gpu_true[d.gpu_index] += d.compute_share * dev_busy[d.index]
        if d.gi_first == d.index:
            gpu_memory[d.gpu_index] += dev_memory[d.index]
        if d.kind == "mig" and not hopper:
            dev_activity[d.index] = np.nan
        dev_activity[d.index] = np.where(gpu_up[d.gpu_index], dev_activity[d.index], np.nan)
    gpu_true = np.minimum(gpu_true, 1.0)
    gpu_activity = np.round(gpu_true, 4) if (hopper or not mig) else np.full((n_g, n_t), np.nan)
    gpu_activity = np.where(gpu_up, gpu_activity, np.nan)

    minute = np.floor(t / NOISE_SLOT).astype(np.int64)
    power = np.zeros((n_g, n_t))
    temperature = np.zeros((n_g, n_t))
    sm_clock = np.zeros((n_g, n_t))
    energy = np.zeros((n_g, n_t))
    ecc_corr = np.zeros((n_g, n_t), dtype=np.int64)
    span = hw.peak_watts - hw.idle_watts
    for g in node.gpus:
        key = stable_key(seed, "phys", g.uuid)
        p = hw.idle_watts + span * gpu_true[g.index] + 4.0 * centered_noise(key, minute)
        p = np.where(throttled[g.index], np.minimum(p, THERMAL_POWER_FACTOR * hw.peak_watts), p)
        power[g.index] = np.round(p, 2)
        heat = (p - hw.idle_watts) / span
        temp = hw.idle_celsius + (hw.peak_celsius - hw.idle_celsius) * heat + centered_noise(key ^ 0x7E, minute)
        temperature[g.index] = np.round(np.where(throttled[g.index], THERMAL_CELSIUS + centered_noise(key ^ 0x7F, minute), temp))
        clock = np.where(gpu_true[g.index] >= BUSY_THRESHOLD, hw.max_sm_mhz, hw.idle_sm_mhz)
        clock = np.where(throttled[g.index], np.round(hw.max_sm_mhz * THERMAL_CLOCK_FACTOR / 15.0) * 15.0, clock)
        sm_clock[g.index] = clock * MHZ
        mean_idle = hw.idle_watts * np.maximum(rel, 0.0)
        energy[g.index] = np.round(mean_idle + span * expected_integral[g.index], 1)
        # A few GPUs accumulate corrected (single-bit) ECC errors slowly, as real fleets do.
        rate = stable_unit(seed, "sbe", g.uuid)
        if rate > 0.75:
            ecc_corr[g.index] = np.floor(np.maximum(rel, 0.0) / 86400.0 * (rate - 0.75) * 40).astype(np.int64)

    down = ~gpu_up
    nan_when_down = [power, temperature, sm_clock, energy, thermal_seconds]
    for arr in nan_when_down:
        arr[down] = np.nan
    memory_clock = np.where(down, np.nan, hw.memory_mhz * MHZ)
    retired = ecc_unc.copy() if hw.has_retired_pages else None
    return NodeArrays(
        t=t, pod_present=pod_pres, pod_slot=pod_slot, hold_activity=hold_act, hold_memory=hold_mem,
        dev_activity=dev_activity, dev_memory=dev_memory, gpu_up=gpu_up, gpu_activity=gpu_activity,
        gpu_memory=gpu_memory, power=power, energy=energy, temperature=temperature, sm_clock=sm_clock,
        memory_clock=memory_clock, throttled=throttled & gpu_up, thermal_seconds=thermal_seconds,
        ecc_corrected=ecc_corr, ecc_uncorrected=ecc_unc, retired_pages=retired, xid_counts=xid_counts,
        xid_last=xid_last, xid_gpus={k: frozenset(v) for k, v in xid_gpus.items()},
    )
