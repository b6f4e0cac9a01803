"""One real ``gpulens demo`` run (built-in fleet, 15 days at 5 minutes), shared read-only by the tests of its outputs."""

from __future__ import annotations

import json
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


def record_demo(folder: Path) -> None:
    """Run the demo into ``folder/out`` and keep what it printed in ``folder/proc.json`` (for :func:`read_demo`)."""
    proc = run_demo(folder / "out").proc
    record = {"args": proc.args, "returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    (folder / "proc.json").write_text(json.dumps(record), encoding="utf-8")


def read_demo(folder: Path) -> DemoRun:
    """The run that :func:`record_demo` left in ``folder``."""
    record = json.loads((folder / "proc.json").read_text(encoding="utf-8"))
    proc = subprocess.CompletedProcess(record["args"], record["returncode"], record["stdout"], record["stderr"])
    return DemoRun(folder / "out", proc)

