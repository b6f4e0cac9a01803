"""Everything one simulated node reports, as numpy arrays over a vector of times.

Both ``SimulatedFleet.node_snapshot`` (one time) and ``SimulatedFleet.history`` (many times) use this
one function, so history at ``t`` is the snapshot at ``t`` by construction. Physical calibration (idle
and loaded power, temperatures, clocks) follows the nvidia-smi captures of H100 and H200 on driver 590
(H100: 70 W / 41 C idle, 630 W / 63 C under gpu-burn, SM 345 -> 1980 MHz, memory 2619 MHz; H200: 78 W
/ 28 C idle, memory 3201 MHz) and the A100-SXM4-80GB data sheet (400 W, SM up to 1410 MHz, memory
1593 MHz). Power and energy come from ``power.py``: one power reading per UTC minute, and an energy
counter that is its exact integral.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpulens.core.device_model import SharingMode
from gpulens.sim.constants import NodeConstants
from gpulens.sim.faults import XID_CODE, Schedule, faults_on
from gpulens.sim.noise import centered_noise, stable_key, stable_unit
from gpulens.sim.plan import NodePlan
from gpulens.sim.power import HARDWARE, PowerLedger, model_power, node_load, sum_rows
from gpulens.sim.precursors import RecurringTrend, Trend, is_trend, trend_of
from gpulens.sim.scenario import FaultKind, Scenario
from gpulens.sim.workloads import NOISE_SLOT, holding_table, table_memory

MHZ = 1e6
MIB = 1024 * 1024


THERMAL_CELSIUS = 88.0
THERMAL_CLOCK_FACTOR = 0.55
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
    power: np.ndarray  # (G, T) float, the minute's reading; NaN while down (as all physical readings below)
    energy: np.ndarray
    temperature: np.ndarray
    sm_clock: np.ndarray
    memory_clock: np.ndarray
    throttled: np.ndarray  # (G, T) bool
    thermal_seconds: np.ndarray
    ecc_corrected: np.ndarray  # (G, T) int64
    ecc_uncorrected: np.ndarray
    pcie_replay: np.ndarray  # (G, T) int64
    nvlink_crc: np.ndarray  # (G, T) int64
    remap_failure: np.ndarray  # (G, T) bool
    retired_pages: np.ndarray | None  # (G, T) int64, None when the model has no page retirement
    xid_counts: dict[int, np.ndarray]  # code -> (G, T) int64 (rows of GPUs without that fault are 0)
    xid_last: dict[int, np.ndarray]  # code -> (G, T) absolute seconds, NaN before the first
    xid_gpus: dict[int, frozenset[int]]
    """Which GPU indexes have a scheduled fault of each code (others do not report that code)."""


def node_constants(s: Scenario, node: NodePlan) -> NodeConstants:
    seed = s.seed
    tab = holding_table(seed, node)
    first = np.array([p.holdings[0] for p in node.pods], dtype=np.int64)
    rates = [stable_unit(seed, "sbe", g.uuid) for g in node.gpus]
    hopper = node.model.has_gpm
    return NodeConstants(
        holdings=tab,
        pod_first_holding=first,
        batch_pods=np.array([p.archetype == "batch" for p in node.pods], dtype=bool),
        gpu_key=np.array([stable_key(seed, "phys", g.uuid) for g in node.gpus], dtype=np.uint64).reshape(-1, 1),
        sbe_per_day=np.array([max(0.0, r - 0.75) * 40 for r in rates]).reshape(-1, 1),
        device_gpu=np.array([d.gpu_index for d in node.devices], dtype=np.int64),
        device_share=np.array([d.compute_share for d in node.devices]).reshape(-1, 1),
        device_base=np.array(
            [(GI_BASE_MIB.get(d.slices or 7, GPU_BASE_MIB) if d.kind == "mig" else GPU_BASE_MIB) * MIB
             for d in node.devices], dtype=np.int64).reshape(-1, 1),
        device_total=np.array([d.memory_total_bytes for d in node.devices], dtype=np.int64).reshape(-1, 1),
        device_gi_first=np.array([d.gi_first for d in node.devices], dtype=np.int64),
        mig_no_gpm=np.array([d.kind == "mig" and not hopper for d in node.devices], dtype=bool),
    )


def evaluate(
    s: Scenario, node: NodePlan, t_in: np.ndarray | list[float], constants: NodeConstants | None = None,
    ledger: PowerLedger | None = None,
) -> NodeArrays:
    """Evaluate every reading of ``node`` at the times ``t`` (float Unix seconds).

    Power and energy come from ``ledger`` (the node's per-minute power and its integral; pass the
    node's long-lived one so that its per-day cache is reused).
    """
    t = np.asarray(t_in, dtype=np.float64).reshape(-1)
    c = constants or node_constants(s, node)
    ledger = ledger or PowerLedger(s, node, c)
    tab = c.holdings
    n_t = t.shape[0]
    hw = HARDWARE[node.model.short_name]
    hopper = node.model.has_gpm
    mig = node.pool.sharing is SharingMode.MIG
    rel = t - s.epoch_seconds
    n_d, n_g = len(node.devices), len(node.gpus)

    # Holdings and pods.
    load = node_load(node, c, t)
    slots, present, hold_act, dev_busy = load.slots, load.present, load.hold_activity, load.dev_busy
    hold_mem = np.where(present, table_memory(tab, t, slots), 0)
    pod_pres = present[c.pod_first_holding]
    pod_slot = np.where(c.batch_pods[:, None], slots[c.pod_first_holding], -1)
    gi_mem = sum_rows(hold_mem, tab.gi_first, n_d)

    # Faults per GPU.
    gpu_up = np.ones((n_g, n_t), dtype=bool)
    throttled = np.zeros((n_g, n_t), dtype=bool)
    thermal_seconds = np.zeros((n_g, n_t))
    ecc_unc = np.zeros((n_g, n_t), dtype=np.int64)
    xid_counts: dict[int, np.ndarray] = {}
    xid_last: dict[int, np.ndarray] = {}
    xid_gpus: dict[int, set[int]] = {}
    counters = {k: np.zeros((n_g, n_t), dtype=np.int64) for k in ("ecc", "nvlink", "pcie")}
    remap_failure = np.zeros((n_g, n_t), dtype=bool)
    for g in node.gpus:
        for f in faults_on(s.faults, node.name, g.index):
            if is_trend(f):
                trend = trend_of(f, s.seed)
                if trend.profile.counter is not None:
                    counters[trend.profile.counter][g.index] += trend.counter(rel)
                active, seconds = trend.throttle(rel)
                throttled[g.index] |= active
                thermal_seconds[g.index] += seconds
                for code, times in _event_times(trend, float(rel.max()) if rel.size else 0.0).items():
                    n = np.searchsorted(times, rel, side="right")
                    xid_counts.setdefault(code, np.zeros((n_g, n_t), dtype=np.int64))[g.index] += n
                    last = np.where(n > 0, times[np.maximum(n - 1, 0)] + s.epoch_seconds, np.nan)
                    prev = xid_last.setdefault(code, np.full((n_g, n_t), np.nan))
                    prev[g.index] = np.fmax(prev[g.index], last)
                    xid_gpus.setdefault(code, set()).add(g.index)
                gpu_up[g.index] &= ~trend.down(rel)
                if trend.profile.failure_xid == 48:
                    ecc_unc[g.index] += 2 * trend.failures(rel)
                elif trend.profile.failure_xid == 64:
                    remap_failure[g.index] |= trend.failed(rel)
                continue
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
    dev_up = gpu_up[c.device_gpu]
    dev_memory = np.minimum(gi_mem[c.device_gi_first] + c.device_base, c.device_total)
    dev_activity = np.where(dev_up & ~c.mig_no_gpm[:, None], dev_busy, np.nan)
    gpu_true = load.gpu_true
    is_first = c.device_gi_first == np.arange(n_d)
    gpu_memory = sum_rows(dev_memory[is_first], c.device_gpu[is_first], n_g)
    gpu_activity = np.round(gpu_true, 4) if (hopper or not mig) else np.full((n_g, n_t), np.nan)
    gpu_activity = np.where(gpu_up, gpu_activity, np.nan)

    # The gauge is the power of the minute (at its first second), the counter its exact integral; the
    # temperature follows the model's power at t itself (the same value at a minute's first second).
    power, energy = ledger.read(t)
    minute = np.floor(t / NOISE_SLOT).astype(np.int64)[None, :]
    p = model_power(hw, c.gpu_key, gpu_true, throttled, t)
    heat = (p - hw.idle_watts) / (hw.peak_watts - hw.idle_watts)
    temp = hw.idle_celsius + (hw.peak_celsius - hw.idle_celsius) * heat + centered_noise(c.gpu_key ^ np.uint64(0x7E), minute)
    hot = THERMAL_CELSIUS + centered_noise(c.gpu_key ^ np.uint64(0x7F), minute)
    temperature = np.round(np.where(throttled, hot, temp))
    clock = np.where(gpu_true >= BUSY_THRESHOLD, hw.max_sm_mhz, hw.idle_sm_mhz)
    clock = np.where(throttled, np.round(hw.max_sm_mhz * THERMAL_CLOCK_FACTOR / 15.0) * 15.0, clock)
    sm_clock = clock * MHZ
    since = np.maximum(rel, 0.0)[None, :]
    ecc_corr = np.floor(since / 86400.0 * c.sbe_per_day).astype(np.int64) + counters["ecc"]

    down = ~gpu_up
    for arr in (power, temperature, sm_clock, energy, thermal_seconds):
        arr[down] = np.nan
    memory_clock = np.where(down, np.nan, hw.memory_mhz * MHZ)
    retired = ecc_unc.copy() if hw.has_retired_pages else None
    return NodeArrays(
        t=t, pod_present=pod_pres, pod_slot=pod_slot, hold_activity=hold_act, hold_memory=hold_mem,
        dev_activity=dev_activity, dev_memory=dev_memory, gpu_up=gpu_up, gpu_activity=gpu_activity,
        gpu_memory=gpu_memory, power=power, energy=energy, temperature=temperature, sm_clock=sm_clock,
        memory_clock=memory_clock, throttled=throttled & gpu_up, thermal_seconds=thermal_seconds,
        ecc_corrected=ecc_corr, ecc_uncorrected=ecc_unc, pcie_replay=counters["pcie"], nvlink_crc=counters["nvlink"],
        remap_failure=remap_failure, retired_pages=retired, xid_counts=xid_counts,
        xid_last=xid_last, xid_gpus={k: frozenset(v) for k, v in xid_gpus.items()},
    )


def _event_times(trend: Trend | RecurringTrend, until: float) -> dict[int, np.ndarray]:
    """XID code -> sorted relative times of the trend's events (of the cycles begun by ``until``)."""
    out: dict[int, list[float]] = {}
    for rel, code in trend.events_until(until):
        out.setdefault(code, []).append(rel)
    return {code: np.array(sorted(times)) for code, times in out.items()}
