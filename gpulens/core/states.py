"""The states analytics gives held time and GPUs: device states of a GE-hour and health states of a GPU."""

from __future__ import annotations

from enum import StrEnum


class DeviceState(StrEnum):
    """What a device's time was; the values are what the result tables store."""

    ALLOCATED_ACTIVE = "allocated-active"
    """Held, and its own activity reading at or above the idle threshold."""
    ALLOCATED_IDLE = "allocated-idle"
    """Held, and its own activity reading below the idle threshold."""
    ALLOCATED_UNMEASURED = "allocated-unmeasured"
    """Held, with no activity reading (unmeasured is not zero)."""
    UNALLOCATED = "unallocated"
    """Known to exist, held by nobody."""
    UNKNOWN = "unknown"
    """No data, or a recorded gap."""

    @property
    def allocated(self) -> bool:
        return self in ALLOCATED_STATES


ALLOCATED_STATES = (DeviceState.ALLOCATED_ACTIVE, DeviceState.ALLOCATED_IDLE, DeviceState.ALLOCATED_UNMEASURED)
"""The states of held time, in display order."""


class HealthState(StrEnum):
    """A GPU's health over a window, mildest first."""

    OK = "ok"
    WATCH = "watch"
    """An early-warning trend (rising correctable ECC, replays, throttling, ...) that precedes failures."""
    WARN = "warn"
    """A warn-class signal crossed its threshold."""
    DRAIN = "drain"
    """Take it out of scheduling."""

    @property
    def rank(self) -> int:
        """0 for ok, 1 for watch, 2 for warn, 3 for drain: the worst of several states has the highest rank."""
        return list(HealthState).index(self)
