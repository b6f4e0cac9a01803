"""Hold a DuckDB store's write lock from another process, as a running collector or analyze would."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_HOLDER = (
    "import duckdb, sys, time\n"
    "con = duckdb.connect(sys.argv[1])\n"
    "print('locked', flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
    "con.close()\n"
)


@contextmanager
def store_held(path: Path, seconds: float = 60.0) -> Iterator[subprocess.Popen[str]]:
    """A child process that opens ``path`` for writing and holds it for ``seconds`` (or until the block ends)."""
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(path), str(seconds)],  # noqa: S603
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
