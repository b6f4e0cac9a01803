"""Build a session fixture's folder once per test run, however many xdist workers ask for it.

The first worker to ask builds the folder under a file lock in the run's temporary folder (the parent of
every worker's own, so all workers of this run and no other run see it); the others wait for the lock and
reuse what it built. A build that raised leaves no ``done`` mark, so the next worker to ask builds again.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder of this whole test run: shared by its xdist workers, new for each run."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def shared_folder(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder ``name`` as ``build(folder)`` left it, built by the first worker of the run to ask."""
    root = run_folder(tmp_path_factory)
    folder, done = root / f"shared-{name}", root / f"shared-{name}.done"
    with (root / f"shared-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not done.exists():
                shutil.rmtree(folder, ignore_errors=True)  # what a build that raised left behind
                folder.mkdir()
                build(folder)
                done.touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return folder
