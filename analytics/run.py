"""``analyze``: run every analysis over one window and write every result table in one transaction.

The steps are the declared stages of :mod:`analytics.stages` (what each reads and writes);
this module binds the facts, resolves the window and the priced inventory, runs the stages and
records the run.

Results of the same window and parameters replace the earlier ones (same ``run_id``), so running
twice changes nothing.
"""

from __future__ import annotations

import gc
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import duckdb

from analytics import chargeback
from analytics.checkpoint import background_checkpoint
from analytics.day_parts import Arrival, RowCopy, Span, defer_checkpoints, ensure_parts, import_into, spans
from analytics.facts import Window, bind_facts, resolve_window
from analytics.inventory import build_inventory, register_catalog
from analytics.pipeline import PARTS, WINDOW, WRITE
from analytics.prices import load_price_book
from analytics.queue_use import has_queue_data, queue_use
from analytics.result_tables import RESULT_TABLES, create_result_tables, delete_run, drop_unused_parts
from analytics.run_values import ModelPrices, RunValues
from analytics.settings import MEMORY_LIMIT, AnalysisSettings
from analytics.stages import RunState, run_stages
from analytics.summary import AnalysisSummary, build_summary
from collector.schema import create_schema
from collector.store_errors import connect_store
from gpulens.core.errors import UserError


def analyze(
    db_path: str | Path, settings: AnalysisSettings, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    parts_from: Sequence[Path] = (), imported: Callable[[Path, int], None] = lambda _store, _parts: None,
    arrivals: Sequence[Arrival] = (), copied: dict[str, tuple[int, float]] | None = None,
) -> AnalysisSummary:
    """Analyse the store at ``db_path``; returns the headline numbers (also stored with the run). ``clock``
    is now: the default window never ends after it. ``parts_from``: workers' stores whose parts the run takes
    first (``--parts-from``; ``imported`` is told each store and its parts added), their idle and fragmentation
    rows copied while it goes on; ``arrivals``: the rows still to copy of parts an earlier
    ``import_parts_from(arrivals=...)`` took. ``copied`` gains each copied table's rows and seconds."""
    with _no_cycle_collection():
        return _open_and_analyze(db_path, settings, clock, _Takes(list(parts_from), imported, list(arrivals)), copied)


@dataclass(frozen=True)
class _Takes:
    """What a run takes from workers' stores before it analyses (``analyze``'s ``parts_from``, ``arrivals``)."""

    parts_from: list[Path]
    imported: Callable[[Path, int], None]
    arrivals: list[Arrival]


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Pause Python's cycle collector for the run: the stages build a few hundred thousand small objects (terms,
    rows, evidence) that reference counting frees, and each collection pass would walk all of them (0.17-0.20 s
    of a next-day run at 8,000 GPUs); what cycles the run leaves are collected after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _open_and_analyze(
    db_path: str | Path, settings: AnalysisSettings, now: Callable[[], datetime], takes: _Takes,
    copied: dict[str, tuple[int, float]] | None,
) -> AnalysisSummary:
    con = _open(db_path, settings)
    if takes.parts_from or takes.arrivals:
        defer_checkpoints(con)
    rows = RowCopy(con, takes.arrivals, copied)
    try:
        for store, added in import_into(con, takes.parts_from, rows, copied):
            takes.imported(store, added)
        return _analyze(con, settings, now, rows)
    finally:
        rows.join()  # the copy's connection ends before the store closes
        con.close()


def _open(db_path: str | Path, settings: AnalysisSettings) -> duckdb.DuckDBPyConnection:
    """The store, set up for a run (memory limit, settings, schema and result tables)."""
    con = connect_store(db_path, read_only=False)
    try:
        if not MEMORY_LIMIT.match(settings.memory_limit):  # a copy's update skips the settings' validator
            raise UserError(f"memory limit {settings.memory_limit!r} is not like 4GB or 512MiB")
        con.execute(f"SET memory_limit = '{settings.memory_limit}'")  # validated above
        con.execute("SET enable_progress_bar = false")
        con.execute("SET preserve_insertion_order = false")
        # Every statement over the f_* views binds their Parquet files again: keep the files' footers once
        # (DuckDB re-reads a file whose modification time changed).
        con.execute("SET parquet_metadata_cache = true")
        create_schema(con)
        create_result_tables(con)
    except BaseException:
        con.close()
        raise
    return con


@dataclass(frozen=True)
class PartDone:
    """One part a worker was given: its label (day, node range), id, and why it was computed (None: it was stored)."""

    label: str
    part_id: str
    why: str | None


def compute_parts(
    db_path: str | Path, settings: AnalysisSettings, pick: Callable[[list[Span]], list[Span]],
    *, clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> list[PartDone]:
    """Find or compute only the parts ``pick`` chooses of the window's spans (a node-range worker: no
    window-level stage, no run; the central run takes the parts with ``--parts-from``)."""
    con = _open(db_path, settings)
    try:
        bind_facts(con, settings.parquet_dir)
        window = resolve_window(con, settings.end, settings.window_seconds, settings.bucket_seconds, clock())
        register_catalog(con, load_price_book(con, settings.prices_path, window.end))
        build_inventory(con, window, settings.mig_proration)
        mine = pick(spans(con, window, settings.parquet_dir, settings.node_ranges))
        notes: dict[str, str] = {}
        with _no_cycle_collection():
            _, ids = ensure_parts(RunState(con, settings, window), mine, notes)
        return [PartDone(span.label, pid, notes.get(span.label)) for span, pid in zip(mine, ids, strict=True)]
    finally:
        con.close()


def _analyze(
    con: duckdb.DuckDBPyConnection, settings: AnalysisSettings, now: Callable[[], datetime], rows: RowCopy
) -> AnalysisSummary:
    rows.hold()  # DuckDB's own work on both cores until the window-level stages: the workers' rows wait
    clock = _Phases()
    source = bind_facts(con, settings.parquet_dir)
    window = resolve_window(con, settings.end, settings.window_seconds, settings.bucket_seconds, now())
    prices = load_price_book(con, settings.prices_path, window.end)
    register_catalog(con, prices)
    build_inventory(con, window, settings.mig_proration)
    devices = con.execute("SELECT count(*) FROM an_dev").fetchone()
    if not devices or not devices[0]:
        if not has_queue_data(con, window):
            raise UserError("the store lists no devices and no quota or pending data in the window: nothing to analyse")
        return _analyze_queues_only(con, settings, source, window, prices.origin, clock)
    clock.done("inventory")
    model_prices: ModelPrices = {}
    for m, lp, cp in con.execute(
        "SELECT DISTINCT coalesce(gpu_model, ''), list_price, contracted_price FROM an_dev WHERE list_price IS NOT NULL"
    ).fetchall():
        priced = prices.price_of(str(m))
        model_prices[str(m)] = (float(lp), float(cp), None if priced is None else priced.committed_share)
    values = RunValues()
    values.model_prices = model_prices
    state = RunState(con, settings, window, values=values, done=clock.done, arriving=rows.part_ids)
    run_stages(state, (PARTS,))
    rows.release()  # copied beside the window-level stages, which leave a core mostly to Python
    with background_checkpoint(con):  # the new parts reach the file while the window-level stages run
        run_stages(state, WINDOW)
    if rows.part_ids:
        rows.wait()  # the imported parts' rows are in before the run lists them
        clock.done("rows from workers")
    interval = values.interval
    parameters = {
        **settings.parameters(),
        "sample_interval_seconds": interval,
        "prices": {"origin": prices.origin, "usd_per_gpu_hour": model_prices, "unpriced": prices.unpriced(
            str(m) for (m,) in con.execute("SELECT DISTINCT gpu_model FROM an_dev WHERE list_price IS NULL").fetchall()
        )},
        "price_book": prices.as_json(),
    }
    state.run_id = run_id = _run_id(window.start, window.end, source, parameters)
    notes = values.part_notes
    con.execute("BEGIN TRANSACTION")
    try:
        delete_run(con, run_id)
        clock.done("delete previous rows")
        run_stages(state, WRITE)
        summary = build_summary(
            con, run_id, window.start, window.end, window.bucket_seconds, interval, source,
            values.fleet, phase_seconds=clock.seconds, prices=prices, days_reused=len(values.parts) - len(notes),
            days_computed=notes, node_ranges=settings.node_ranges,
        )
        con.execute(
            "INSERT INTO analysis_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id, window.start, window.end, window.bucket_seconds, interval,
                json.dumps(parameters, sort_keys=True, default=str), source,
                json.dumps(summary.as_json(), default=str), datetime.now(UTC).replace(tzinfo=None),
            ],
        )
        con.execute("COMMIT")
        clock.done("summary + commit")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    drop_unused_parts(con)
    if settings.out_dir is not None:
        chargeback.write_focus(con, run_id, settings.out_dir, settings.focus_formats)
    return summary


NO_DEVICES = (
    "the store holds no device samples in the window (Kueue metrics only): collect from the exporters or "
    "dcgm-exporter (`gpulens collect`) to measure them"
)


def _analyze_queues_only(
    con: duckdb.DuckDBPyConnection, settings: AnalysisSettings, source: str, window: Window, price_origin: str,
    clock: _Phases,
) -> AnalysisSummary:
    """A store without devices (Kueue metrics only): quota use and pending; the device analyses are skipped."""
    queues = tuple(queue_use(con, window))
    clock.done("quota use")
    parameters = {**settings.parameters(), "scope": "queues-only", "prices": {"origin": price_origin}}
    run_id = _run_id(window.start, window.end, source, parameters)
    summary = AnalysisSummary(
        run_id=run_id, window_start=window.start, window_end=window.end, bucket_seconds=window.bucket_seconds,
        sample_interval_seconds=0.0, fact_source=source, ge_hours_by_state={}, cost_usd_by_state={},
        idle_by_tenant=(), stranded_ge_hours=0.0, top_risk_tenants=(), drain_candidates=(), warn_gpus=0,
        fleet_cost_usd=Decimal(0), chargeback_total_usd=Decimal(0), phase_seconds=clock.seconds,
        skipped=dict.fromkeys(RESULT_TABLES, NO_DEVICES), queues=queues,
    )
    con.execute("BEGIN TRANSACTION")
    try:
        delete_run(con, run_id)
        con.execute(
            "INSERT INTO analysis_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id, window.start, window.end, window.bucket_seconds, 0.0,  # no samples: no interval
                json.dumps(parameters, sort_keys=True, default=str), source,
                json.dumps(summary.as_json(), default=str), datetime.now(UTC).replace(tzinfo=None),
            ],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return summary


class _Phases:
    """Wall-clock seconds per phase of one run (reported in the summary, for docs/performance.md)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def done(self, phase: str) -> None:
        now = time.perf_counter()  # a phase that runs once per day part adds up
        self.seconds[phase] = round(self.seconds.get(phase, 0.0) + now - self._last, 3)
        self._last = now


def _run_id(start: datetime, end: datetime, source: str, parameters: dict[str, object]) -> str:
    key = json.dumps(
        {"start": start.isoformat(), "end": end.isoformat(), "source": source, "parameters": parameters},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(key.encode()).hexdigest()[:16]
