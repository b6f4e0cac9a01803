"""A 20-node store with one GPU that degrades and fails, one still degrading and one healthy look-alike."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from collector.backfill import backfill_simulated
from gpulens.sim.fault_fleet import fault_fleet
from gpulens.sim.fleet import SimulatedFleet
from gpulens.sim.scenario import Scenario

DAY = 86400.0
FAILED = ("train-h100-3", 2)
"""Correctable ECC errors rise from 1d12h, double-bit ECC (XID 48) at 2d08h."""
DEGRADING = ("serve-h200-5", 1)
"""PCIe replays rise from 2d12h; it would fail at 3d12h, after the history ends."""
LOOKALIKE = ("train-h100-7", 4)
"""A 40-minute NVLink CRC burst at 1d20h on a healthy GPU."""


def failing_scenario() -> Scenario:
    base = fault_fleet(20, 3, seed=5, degrading_share=0, lookalike_share=0, sudden_share=0)
    faults = [
        {"kind": "degradation", "node": FAILED[0], "gpu": FAILED[1], "at": "1d12h", "fail_after": "20h",
         "precursor": "ecc"},
        {"kind": "degradation", "node": DEGRADING[0], "gpu": DEGRADING[1], "at": "2d12h", "fail_after": "1d",
         "precursor": "pcie"},
        {"kind": "lookalike", "node": LOOKALIKE[0], "gpu": LOOKALIKE[1], "at": "1d20h", "precursor": "nvlink",
         "duration": "40m"},
    ]
    return Scenario.model_validate({**base.model_dump(), "faults": faults})


def failing_fleet() -> SimulatedFleet:
    """The simulated fault fleet (deterministic: every call gives the same nodes, GPUs and faults)."""
    return SimulatedFleet(failing_scenario())


def build_failing_store(path: Path) -> SimulatedFleet:
    """Backfill 3 days at 5 minutes and analyze them (the whole history in one window)."""
    fleet = failing_fleet()
    start = fleet.scenario.epoch_seconds
    backfill_simulated(str(path), fleet=fleet, start=start, end=start + 3 * DAY, step=300.0)
    analyze(path, AnalysisSettings(window_seconds="3d", bucket_seconds="5m"))
    return fleet


@dataclass(frozen=True)
class FailingStore:
    """The analyzed store at ``path`` and the fleet that produced it (node names, GPU UUIDs)."""

    path: Path
    fleet: SimulatedFleet

    def copy_store(self, folder: Path) -> Path:
        """A private copy of the store (and its WAL, if any) in ``folder``, for a test that writes to it."""
        wal = self.path.with_name(self.path.name + ".wal")
        if wal.exists():
            shutil.copy(wal, folder / wal.name)
        return Path(shutil.copy(self.path, folder / self.path.name))
