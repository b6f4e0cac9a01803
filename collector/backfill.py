"""Backfill the store from the simulated fleet in virtual time, through the same idempotent ingest path.

History is produced chunk by chunk (a day by default) with ``SimulatedFleet.history()``; each chunk is
one committed window of source ``sim``, so an interrupted backfill resumes where it stopped and a
repeated one adds nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import polars as pl

from collector.schema import ALL_TABLES
from collector.store import Store, WindowResult

SOURCE = "sim"
DAY = 86400.0


@dataclass(frozen=True)
class ChunkProgress:
    """Reported after each chunk: which one, what it added, and whether it was already stored."""

    index: int
    total: int
    start: float
    end: float
    rows: int
    skipped: bool
    seconds: float


@dataclass(frozen=True)
class BackfillSummary:
    """What a backfill did."""

    start: float
    end: float
    step: float
    chunks: int
    skipped: int
    rows: dict[str, int]
    seconds: float

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())


def history_frames(history: Any) -> dict[str, pl.DataFrame]:
    """The store tables held by a ``SimulatedHistory`` (a frozen dataclass of polars frames)."""
    names = [f.name for f in fields(history)] if is_dataclass(history) else list(vars(history))
    out = {}
    for name in names:
        frame = getattr(history, name)
        if name in ALL_TABLES and isinstance(frame, pl.DataFrame) and frame.height:
            out[name] = frame
    return out


def _fleet(scenario: Any) -> Any:
    from gpulens.sim.fleet import SimulatedFleet
    from gpulens.sim.scenario_file import load_scenario

    if scenario is None or isinstance(scenario, Path | str):
        scenario = load_scenario(Path(scenario) if scenario is not None else None)
    return SimulatedFleet(scenario)


def backfill_simulated(
    db_path: str | Path,
    scenario: Any = None,
    start: float | None = None,
    end: float | None = None,
    step: float = 60.0,
    progress: Callable[[ChunkProgress], None] | None = None,
    *,
    chunk: float = DAY,
    nodes: list[str] | None = None,
    fleet: Any = None,
) -> BackfillSummary:
    """Write simulated history ``[start, end)`` at ``step`` into the store at ``db_path``.

    ``scenario`` is a ``Scenario``, a path to a scenario file, or ``None`` for the built-in default.
    ``end`` defaults to now (rounded down to ``step``), ``start`` to 14 days before ``end``.
    """
    began = time.perf_counter()
    if end is None:
        end = (time.time() // step) * step
    if start is None:
        start = end - 14 * DAY
    fleet = fleet if fleet is not None else _fleet(scenario)
    windows = []
    t = start
    while t < end:
        windows.append((t, min(t + chunk, end)))
        t += chunk
    rows: dict[str, int] = {}
    skipped = 0
    with Store(str(db_path)) as store:
        for i, (a, b) in enumerate(windows, start=1):
            t0 = time.perf_counter()
            if store.window_done(SOURCE, a, b):
                skipped += 1
                if progress:
                    progress(ChunkProgress(i, len(windows), a, b, 0, True, time.perf_counter() - t0))
                continue
            history = fleet.history(a, b, step, nodes)
            result: WindowResult = store.ingest_window(SOURCE, a, b, history_frames(history))
            for table, n in result.rows.items():
                rows[table] = rows.get(table, 0) + n
            if progress:
                progress(ChunkProgress(i, len(windows), a, b, result.total_rows, False, time.perf_counter() - t0))
    return BackfillSummary(start, end, step, len(windows), skipped, rows, time.perf_counter() - began)
