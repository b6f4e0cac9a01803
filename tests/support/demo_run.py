"""One real ``gpulens demo`` run (built-in fleet, 15 days at 5 minutes), shared read-only by the tests of its outputs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DAYS = "15"
STEP = "5m"


@dataclass(frozen=True)
class DemoRun:
    """What the demo left in ``out`` (store, report, recommendation YAML) and what it printed."""

    out: Path
    proc: subprocess.CompletedProcess[str]

    @property
    def store(self) -> Path:
        return self.out / "gpulens.duckdb"

    def copy_store(self, folder: Path) -> Path:
        """A private copy of the demo store (and its WAL, if any) in ``folder``, for a test that writes to it."""
        wal = self.store.with_name(self.store.name + ".wal")
        if wal.exists():
            shutil.copy(wal, folder / wal.name)
        return Path(shutil.copy(self.store, folder / self.store.name))


def run_demo(out: Path) -> DemoRun:
    """Run ``gpulens demo --out out`` as the README's first command does (a subprocess, the real CLI)."""
    proc = subprocess.run(
        [sys.executable, "-m", "gpulens.cli", "demo", "--out", str(out), "--days", DAYS, "--step", STEP],
        capture_output=True, text=True, timeout=600,
    )
    return DemoRun(out, proc)

