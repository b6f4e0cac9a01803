"""Run the real ``gpulens`` command line in a subprocess, as a user would, and check its error contract."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def gpulens(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m gpulens.cli <args>`` from the repository root, output captured as text."""
    return subprocess.run([sys.executable, "-m", "gpulens.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Bad input: exit 2 and exactly one ``gpulens: error: ...`` line holding every fragment, no traceback."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulens: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], proc.stderr


def analyze_process(*args: str | Path) -> subprocess.Popen[str]:
    """``gpulens analyze <args>`` started in a subprocess (workers of a split run side by side)."""
    return subprocess.Popen([sys.executable, "-m", "gpulens.cli", "analyze", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(proc: subprocess.Popen[str]) -> str:
    """What a started command printed, once it ended with exit code 0."""
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return out
