"""A window's days split between workers: slice I of N analyses the days k with k mod N == I.

Each day of the slice is analysed on its own (a one-day window ending at the day's end, clipped to the
window), so the worker's store holds that day's part, which the central store takes with
``--parts-from`` and merges without reading the day's facts again. Every worker must cut the same window,
so a slice ends at an explicit end or, by default, at the last UTC midnight. A worker's store is a copy of the central store without its fact rows
(``copy_dimensions``): the facts come from the shared Parquet export.

For the largest fleets a day is cut into R node ranges (``--node-ranges R``, ``analytics/node_ranges.py``):
the slices then split the window's (day, range) parts, day by day and range by range, part k to worker
k mod N (one pod per part: N = days x R). Such a worker computes its parts only (no window-level stage,
which would read every node's facts); the central run with the same ``--node-ranges`` takes them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from analytics.day_parts import Span, day_windows
from analytics.facts import Window
from analytics.run import PartDone
from analytics.settings import AnalysisSettings
from analytics.summary import AnalysisSummary
from gpulens.core.errors import UserError

_SLICE = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Slice:
    """Slice ``index`` (from 0) of ``count`` workers."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Slice:
        """``I/N``, as ``--slice`` takes it (an Indexed Job passes ``$(JOB_COMPLETION_INDEX)/N``)."""
        m = _SLICE.match(text)
        if not m:
            raise UserError(f"--slice {text!r} is not INDEX/COUNT, e.g. 0/7 (the first of 7 workers)")
        index, count = int(m.group(1)), int(m.group(2))
        if count < 1:
            raise UserError(f"--slice {text}: COUNT must be at least 1")
        if index >= count:
            raise UserError(f"--slice {text}: the index must be 0 to {count - 1} of {count} worker(s)")
        return cls(index, count)

    def days(self, window: Window) -> list[Window]:
        """The window's days (UTC, clipped to the window) that fall to this slice."""
        return [day for k, day in enumerate(day_windows(window)) if k % self.count == self.index]

    def parts(self, window: Window, ranges: int) -> list[tuple[Window, list[int]]]:
        """The (day, node ranges of it) that fall to this slice: part k = day x ``ranges`` + range."""
        out = []
        for d, day in enumerate(day_windows(window)):
            mine = [r for r in range(ranges) if (d * ranges + r) % self.count == self.index]
            if mine:
                out.append((day, mine))
        return out


def copy_dimensions(central: Path, worker: Path) -> int:
    """Make ``worker`` a store holding every table of ``central`` but the facts (read from Parquet);
    returns the tables copied. An existing worker store keeps its analysed days; its dimension and
    bookkeeping tables are replaced by the central store's."""
    import duckdb

    from collector.schema import ALL_TABLES, FACTS
    from collector.store import Store

    if not central.is_file():
        raise UserError(f"--dimensions-from {central}: no such store")
    if central.resolve() == worker.resolve():
        raise UserError(f"--dimensions-from {central} is --db itself: a worker analyses into a store of its own")
    try:
        worker.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--db {worker}: cannot create its folder: {exc.strerror or exc}") from exc
    store = Store(str(worker))  # created, with the schema, where there is none yet
    con = store.con
    try:
        try:
            con.execute("ATTACH ? AS central (READ_ONLY)", [str(central)])
        except duckdb.Error as exc:
            raise UserError(f"--dimensions-from {central}: cannot open it ({str(exc).splitlines()[0]})") from exc
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'central' AND schema_name = 'main'"
        ).fetchall()]
        copied = [t for t in ALL_TABLES if t in tables and t not in FACTS]  # the store's own, never results
        con.execute("BEGIN TRANSACTION")
        try:
            for table in copied:
                con.execute(f'DELETE FROM "{table}"')  # noqa: S608 - names from the store's catalog
                con.execute(f'INSERT INTO "{table}" SELECT * FROM central."{table}"')  # noqa: S608
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        return len(copied)
    finally:
        store.close()


def _slice_window(settings: AnalysisSettings, now: Callable[[], datetime]) -> Window:
    if settings.end is None:
        today = now().astimezone(UTC).replace(tzinfo=None)
        end = datetime.combine(today.date(), datetime.min.time())
    else:
        end = settings.end.astimezone(UTC).replace(tzinfo=None) if settings.end.tzinfo else settings.end
    return Window(end - timedelta(seconds=settings.window_seconds), end, settings.bucket_seconds)


def _one_day(settings: AnalysisSettings, day: Window) -> AnalysisSettings:
    return settings.model_copy(update={"window_seconds": int((day.end - day.start).total_seconds()), "end": day.end})


def analyze_ranges(
    db: Path, settings: AnalysisSettings, part: Slice,
    compute: Callable[[Path, AnalysisSettings, Callable[[list[Span]], list[Span]]], list[PartDone]],
    now: Callable[[], datetime],
) -> list[PartDone]:
    """Compute the slice's (day, node range) parts into ``db``, a day at a time (the window cut as
    :func:`analyze_slice` cuts it); returns them in part order."""
    done: list[PartDone] = []
    for day, ranges in part.parts(_slice_window(settings, now), settings.node_ranges):
        done += compute(db, _one_day(settings, day), _Pick(tuple(ranges)))
    return done


@dataclass(frozen=True)
class _Pick:
    """The node ranges of one day a worker computes (of the day's spans, one per range in order)."""

    ranges: tuple[int, ...]

    def __call__(self, found: list[Span]) -> list[Span]:
        return [found[r] for r in self.ranges]


def analyze_slice(
    db: Path, settings: AnalysisSettings, part: Slice,
    analyze: Callable[[Path, AnalysisSettings], AnalysisSummary], now: Callable[[], datetime],
) -> list[AnalysisSummary]:
    """Analyse each day of the slice into ``db`` (one run per day); returns the runs in day order. Without an
    end, the window ends at the last UTC midnight (``now``): whole days, the same for every worker of a Job
    that starts on one day (a worker that cut another window only leaves the central run more to compute)."""
    return [analyze(db, _one_day(settings, day)) for day in part.days(_slice_window(settings, now))]
