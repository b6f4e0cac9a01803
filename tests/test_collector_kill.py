"""A collector killed (SIGKILL, a real subprocess) in the middle of ingest, then rerun, leaves exactly the
store an uninterrupted run leaves: no half window, nothing twice."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import duckdb
import pytest

from collector.backfill import backfill_simulated
from collector.schema import ALL_TABLES

pytestmark = pytest.mark.slow

DAY = 86400.0
END = 1_790_000_000.0 - 1_790_000_000.0 % DAY
DAYS = 3
STEP = 600.0
ROOT = Path(__file__).resolve().parents[1]


def _content(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every table, in a stable order; bookkeeping without its wall-clock columns."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = {}
        for table in ALL_TABLES:
            if table == "ingest_batches":
                sql = "SELECT source, window_start, window_end, rows FROM ingest_batches ORDER BY ALL"
            elif table == "watermarks":
                sql = "SELECT source, watermark FROM watermarks ORDER BY ALL"
            else:
                sql = f"SELECT * FROM {table} ORDER BY ALL"  # noqa: S608 - schema table names
            out[table] = con.execute(sql).fetchall()
        return out
    finally:
        con.close()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[object, ...]]]:
    db = tmp_path_factory.mktemp("ref") / "ref.duckdb"
    backfill_simulated(db, None, END - DAYS * DAY, END, STEP)
    return _content(db)


def _wait_for(proc: subprocess.Popen[str], marker: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if marker in line:
            return
        if not line and proc.poll() is not None:
            raise AssertionError(f"collector exited ({proc.returncode}) before {marker!r}")
    raise AssertionError(f"no {marker!r} within {timeout}s")


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def _windows_done(db: Path) -> int:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return int(con.execute("SELECT count(*) FROM ingest_batches").fetchall()[0][0])
    finally:
        con.close()


def test_a_kill_inside_the_transaction_leaves_no_half_window(
    tmp_path: Path, uninterrupted: dict[str, list[tuple[object, ...]]]
) -> None:
    db = tmp_path / "killed.duckdb"
    # The second window's frames are handed over lazily: after the first table is inserted (inside the
    # open transaction) the producer announces it and stalls, and the test kills the process there.
    script = textwrap.dedent(f"""
        import sys, time
        from collector.backfill import history_frames
        from collector.store import Store
        from gpulens.sim.fleet import SimulatedFleet
        from gpulens.sim.scenario_file import load_scenario

        class StallAfterFirstTable(dict):
            def items(self):
                for i, item in enumerate(super().items()):
                    if i == 1:
                        print("INSIDE-TRANSACTION", file=sys.stderr, flush=True)
                        time.sleep(600)
                    yield item

        fleet = SimulatedFleet(load_scenario(None))
        with Store({str(db)!r}) as store:
            for i in range({DAYS}):
                a = {END - DAYS * DAY} + i * {DAY}
                frames = history_frames(fleet.history(a, a + {DAY}, {STEP}))
                store.ingest_window("sim", a, a + {DAY}, StallAfterFirstTable(frames) if i == 1 else frames)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(proc, "INSIDE-TRANSACTION")
        _kill(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _windows_done(db) == 1
    content = _content(db)
    assert len(content["device_samples"]) == len(uninterrupted["device_samples"]) // DAYS, "no half window"
    backfill_simulated(db, None, END - DAYS * DAY, END, STEP)
    assert _content(db) == uninterrupted


def test_the_collect_command_killed_at_a_random_moment_then_rerun_gives_the_same_store(
    tmp_path: Path, uninterrupted: dict[str, list[tuple[object, ...]]]
) -> None:
    db = tmp_path / "cli.duckdb"
    args = [sys.executable, "-m", "gpulens.cli", "collect", "--simulate", "--days", str(DAYS), "--step",
            f"{STEP:g}s", "--end", f"{END:.0f}", "--db", str(db)]
    proc = subprocess.Popen(args, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(proc, "sim chunk 1/3")
        time.sleep(random.uniform(0.0, 0.5))  # somewhere in computing or writing the second window
        _kill(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _windows_done(db) < DAYS
    rerun = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert "already stored" in rerun.stderr
    assert _content(db) == uninterrupted
