"""The hardware check behind ``scripts/validate-nvml``: read what the NVML source reads, print it and timings.

Read-only: it initialises NVML, runs the device source for a few cycles (so GPM has two samples), waits
briefly for XID events, and prints every reading plus per-function call counts, errors and latency. It
never calls a setter (no clocks, modes, MIG layout, persistence or GPM streaming changes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

from exporter.nvml.funnel import NvmlFunnel
from exporter.nvml.source import NvmlDeviceSource
from gpulens.core.device_model import DeviceReadings, Gpu

MIB = 1024 * 1024


def _fmt(value: Any, scale: float = 1.0, unit: str = "") -> str:
    if value is None:
        return "absent"
    if isinstance(value, float | int) and not isinstance(value, bool):
        return f"{value / scale:.3f}{unit}" if scale != 1.0 else f"{value}{unit}"
    return str(value)


def describe_gpu(gpu: Gpu) -> list[str]:
    h = gpu.health
    lines = [
        f"GPU {gpu.index} {gpu.model} {gpu.uuid} up={gpu.up} mode={gpu.sharing_mode.value} driver={gpu.driver_version}",
        f"  memory used/total: {_fmt(gpu.memory_used_bytes, MIB, ' MiB')} / {_fmt(gpu.memory_total_bytes, MIB, ' MiB')}"
        f"  activity: {_fmt(gpu.activity_ratio)}",
        f"  temperature: {_fmt(h.temperature_celsius, unit=' C')}  power: {_fmt(h.power_watts, unit=' W')}"
        f"  energy: {_fmt(h.energy_joules, unit=' J')}",
        f"  clocks sm/mem: {_fmt(h.sm_clock_hz, 1e6, ' MHz')} / {_fmt(h.memory_clock_hz, 1e6, ' MHz')}"
        f"  throttle: {','.join(sorted(h.throttle_reasons)) or 'none'}",
        f"  ecc corrected/uncorrected: {_fmt(h.ecc_corrected_total)} / {_fmt(h.ecc_uncorrected_total)}"
        f"  retired pages: {_fmt(h.retired_pages_total)}  row remap failed: {_fmt(h.remapped_rows_failure)}",
        f"  pcie replay: {_fmt(h.pcie_replay_total)}  nvlink crc: {_fmt(h.nvlink_crc_errors_total)}"
        f"  thermal violation: {_fmt(h.thermal_violation_seconds_total, unit=' s')}",
        f"  xid counts: {dict(h.xid_counts) or 'none'}",
    ]
    for m in gpu.mig_instances:
        lines.append(
            f"  MIG {m.uuid} gi={m.gpu_instance_id} ci={m.compute_instance_id} profile={m.profile}"
            f" slices={m.slices} ci_slices={m.compute_instance_slices}"
            f" memory={_fmt(m.memory_used_bytes, MIB, ' MiB')}/{_fmt(m.memory_total_bytes, MIB, ' MiB')}"
            f" activity={_fmt(m.activity_ratio)}"
        )
    return lines


def latency_table(funnel: NvmlFunnel) -> list[str]:
    rows = sorted(funnel.stats.items(), key=lambda kv: kv[1].seconds, reverse=True)
    lines = [f"{'function':48} {'calls':>6} {'errors':>6} {'mean ms':>9} {'max ms':>9}  last error"]
    for name, s in rows:
        mean = 1000 * s.seconds / s.calls if s.calls else 0.0
        lines.append(f"{name:48} {s.calls:6d} {s.errors:6d} {mean:9.3f} {1000 * s.max_seconds:9.3f}  "
                     f"{s.last_error or ''}")
    return lines


def run_validation(nvml: Any, out: TextIO, *, cycles: int = 3, interval: float = 1.0, xid_wait: float = 2.0,
                   node: str = "local", sleep: Callable[[float], None] = time.sleep,
                   clock: Callable[[], float] = time.time) -> DeviceReadings:
    """Run the NVML source ``cycles`` times ``interval`` apart and print readings and call latency."""
    started = time.perf_counter()
    source = NvmlDeviceSource(nvml, node, watch_xids=True, xid_wait_ms=200)
    print(f"NVML initialised in {1000 * (time.perf_counter() - started):.1f} ms; "
          f"driver {source.driver_version}", file=out)
    readings: DeviceReadings | None = None
    try:
        for i in range(max(cycles, 1)):
            if i:
                sleep(interval)
            t0 = time.perf_counter()
            readings = source.read_devices(clock())
            print(f"cycle {i + 1}: {len(readings.gpus)} GPUs, "
                  f"{sum(len(g.mig_instances) for g in readings.gpus)} MIG devices, "
                  f"{len(readings.processes)} processes in {1000 * (time.perf_counter() - t0):.2f} ms", file=out)
        sleep(xid_wait)
        readings = source.read_devices(clock())
    finally:
        source.close()
    print("", file=out)
    for gpu in readings.gpus:
        print("\n".join(describe_gpu(gpu)), file=out)
    for p in readings.processes:
        print(f"  process pid={p.pid} device={p.device_id} memory={_fmt(p.used_memory_bytes, MIB, ' MiB')}"
              f" sm={_fmt(p.sm_utilization_ratio)}", file=out)
    print("", file=out)
    print("\n".join(latency_table(source.funnel)), file=out)
    missing = sorted(source.funnel.missing_functions())
    print(f"\nfunctions missing in this driver: {', '.join(missing) or 'none'}", file=out)
    down = source.gpu_errors()
    print(f"GPUs down: {down or 'none'}", file=out)
    return readings
