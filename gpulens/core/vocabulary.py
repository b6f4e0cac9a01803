"""The shared vocabulary every layer speaks: GPU-equivalents of MIG slices and the clock-event reasons.

Defined once here, so the simulator, NVML, the exposition, the collector
and analytics cannot drift apart.
"""

from __future__ import annotations

from enum import StrEnum

COMPUTE_SLICES = 7
"""Compute slices of a MIG-capable GPU: a MIG instance of ``g`` slices is ``g / 7`` GPU-equivalents."""
MEMORY_SLICES = 8
"""Memory slices of a MIG-capable GPU."""


def slices_gpu_equivalents(compute_slices: int | float) -> float:
    """GPU-equivalents (GE) of ``compute_slices`` MIG compute slices."""
    return compute_slices / COMPUTE_SLICES


class ThrottleReason(StrEnum):
    """NVML's clock-event (throttle) reasons, named as the exporter labels them (bit order of NVML)."""

    GPU_IDLE = "gpu_idle"
    APPLICATIONS_CLOCKS_SETTING = "applications_clocks_setting"
    SW_POWER_CAP = "sw_power_cap"
    HW_SLOWDOWN = "hw_slowdown"
    SYNC_BOOST = "sync_boost"
    SW_THERMAL = "sw_thermal"
    HW_THERMAL = "hw_thermal"
    HW_POWER_BRAKE = "hw_power_brake"
    DISPLAY_CLOCK_SETTING = "display_clock_setting"


NVML_THROTTLE_BITS: tuple[tuple[int, ThrottleReason], ...] = tuple(
    (1 << bit, reason) for bit, reason in enumerate(ThrottleReason)
)
"""NVML's ``nvmlClocksEventReason*`` bit of each reason (0x1 gpu_idle ... 0x100 display_clock_setting)."""
