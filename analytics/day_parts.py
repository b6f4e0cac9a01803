"""Day parts: the results of one UTC day of a window, computed once and shared by every run that holds it.

A window is cut at UTC midnights into spans (a day, clipped to the window). A span's ``idle_capacity``
and ``fragmentation`` rows, and the small sums the window-level stages read (devices sampled, who held
what, chargeback lines, GPUs present), depend only on the span's facts, its devices and the
parameters, so they are stored once under a **part id**: a hash of the span, a fingerprint of its
facts, its devices and every parameter. A run finds or computes the part of each of its days and lists
them in ``analysis_run_parts``; ``idle_capacity`` and ``fragmentation`` are views over the parts of a
run. When a day's facts change (the collector's window log ``ingest_batches``, the rows in the span, or
the Parquet files of its ``day=``/``date=`` partition), its fingerprint changes and only that day is
computed again; the next day of a daily analysis is one new part.

The sample interval is the median of the spans' median sample spacings (each stored per span under
its own fingerprint); a part is keyed by the interval, so a new interval recomputes every part. One
day's facts are held at a time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from statistics import median

import duckdb

from analytics.fact_files import FactFile, fact_files
from analytics.facts import FACT_TABLES, Window, bind_fact_files, bind_facts, infer_spacing
from analytics.node_ranges import NODE_FACTS, NodeRange, node_ranges
from analytics.placement.seen import incomplete_owners, merge_seen
from analytics.placement.settings import TopologySettings
from analytics.placement.stranded import LAST_OF_WINDOW
from analytics.result_tables import DAY_PARTS, PART_ROWS
from analytics.settings import EarlyWarningRules
from analytics.stages import (
    PART_READ,
    PART_WRITE,
    SAMPLE_TABLES,
    RunState,
    Stage,
    drop_tables,
    run_stages,
    stage,
)
from gpulens.core.errors import UserError

log = logging.getLogger("gpulens.analytics")
"""What a run says beside its results (the command line prints it as ``gpulens: note: ...``)."""

PART_FACTS = ("device_samples", "allocations", "gpu_samples", "gaps", "pending_demand")
"""Facts a day part reads (the window-level stages read the rest)."""

_DAY = re.compile(r"^(?:day|date)=(\d{4}-\d{2}-\d{2})$")

DAY_SCOPED = ("device_samples", "allocations", "gpu_samples", "pending_demand")
"""Facts whose rows sit in the partition of their own day (``ts``): a day part binds that day's files only.
Gaps (a gap may cross midnight) and the snapshots (read up to the span's end) keep every file."""


@dataclass(frozen=True)
class Span:
    """One day of the window (clipped to it) and what its facts and devices looked like."""

    window: Window
    facts: str
    devices: str
    files: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Per fact table read from day-partitioned Parquet: its files of this day (and of no day), which the
    day's stages read instead of the whole history's (``DAY_SCOPED``)."""
    nodes: NodeRange | None = None
    """The day's range of nodes this part covers (None: every node, the whole day)."""

    @property
    def label(self) -> str:
        """The day (ISO date), and its node range when it has one."""
        day = self.window.start.date().isoformat()
        return day if self.nodes is None else f"{day} {self.nodes.label}"

    def scoped(self, parameters: dict[str, object]) -> dict[str, object]:
        """The part's parameters: the run's, and its node range (a whole day's id is as before)."""
        return parameters if self.nodes is None else {**parameters, "nodes": self.nodes.key}

    @property
    def spacing_key(self) -> str:
        return _hash({"start": self.window.start, "end": self.window.end, "bucket": self.window.bucket_seconds,
                      "facts": self.facts})

    def part_id(self, parameters: dict[str, object]) -> str:
        return _hash({"start": self.window.start, "end": self.window.end, "facts": self.facts,
                      "devices": self.devices, "parameters": self.scoped(parameters)})


def _hash(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def day_windows(window: Window) -> list[Window]:
    """The window cut at UTC midnights (the bucket divides a day, so every span is whole buckets)."""
    out = []
    start = window.start
    while start < window.end:
        end = min(datetime.combine(start.date(), datetime.min.time()) + timedelta(days=1), window.end)
        out.append(Window(start, end, window.bucket_seconds))
        start = end
    return out


def spans(con: duckdb.DuckDBPyConnection, window: Window, parquet_dir: Path | None, ranges: int = 1) -> list[Span]:
    """The window's spans with the fingerprints of their facts and of their devices (``an_dev``); with
    ``ranges`` above 1, each day cut into that many node ranges (day by day, range by range). A range's
    facts fingerprint is its day's (any change of the day's facts computes each of its ranges again)."""
    files = _parquet_files(con, parquet_dir)
    days = day_windows(window)
    cuts: list[NodeRange | None] = [None] if ranges == 1 else list(node_ranges(con, ranges))
    devices = {r: _devices(con, days, cut) for r, cut in enumerate(cuts)}
    out = []
    for k, w in enumerate(days):
        facts: list[object] = [_store_facts(con, w, [t for t in PART_FACTS if t not in files])]
        mine = {t: [f for f in listed if f.day is None or w.start.date() == f.day] for t, listed in sorted(files.items())}
        facts += [(t, [f.fingerprint for f in listed]) for t, listed in mine.items()]
        scoped = tuple((t, tuple(f.relative for f in mine[t])) for t in DAY_SCOPED
                       if any(f.day is not None for f in mine.get(t, ())))
        out += [Span(w, _hash(facts), devices[r][k], scoped, cut) for r, cut in enumerate(cuts)]
    return out


@dataclass(frozen=True)
class _Listed:
    """A fact file under ``<parquet>/<table>/``: its partition day (None: none) and what it holds."""

    day: date | None
    relative: str
    content: FactFile

    @property
    def fingerprint(self) -> tuple[object, ...]:
        c = self.content
        return (self.relative, c.rows, c.ts_min, c.ts_max, c.sha256)


def _parquet_files(con: duckdb.DuckDBPyConnection, parquet_dir: Path | None) -> dict[str, list[_Listed]]:
    """Per fact table read from Parquet: its files, known by their content (never by their times)."""
    if parquet_dir is None:
        return {}
    found = {table: sorted((parquet_dir / table).rglob("*.parquet")) for table in PART_FACTS
             if (parquet_dir / table).is_dir()}
    contents = fact_files(con, [f for files in found.values() for f in files])
    out: dict[str, list[_Listed]] = {}
    for table, files in found.items():
        if files:
            out[table] = [_Listed(_day_of(str(f.relative_to(parquet_dir / table))), str(f.relative_to(parquet_dir / table)),
                                  contents[f]) for f in files]
    return out


def _store_facts(con: duckdb.DuckDBPyConnection, w: Window, tables: list[str]) -> list[object]:
    """The store's side of a span's fingerprint: the collector's batches over it and its row counts."""
    p = {"s": w.start, "e": w.end}
    batches = con.execute(
        """SELECT list((source, window_start, window_end, rows, committed_at) ORDER BY ALL) FROM ingest_batches
           WHERE window_end > $s AND window_start < $e""", p,
    ).fetchone()
    counts = []
    for table in tables:
        if table == "gaps":
            row = con.execute(
                "SELECT list((source, target, gap_start, gap_end) ORDER BY ALL) FROM f_gaps "
                "WHERE gap_end > $s AND gap_start < $e", p,
            ).fetchone()
        else:
            row = con.execute(f"SELECT count(*), max(ts) FROM f_{table} WHERE ts >= $s AND ts < $e", p).fetchone()  # noqa: S608
        counts.append((table, row))
    return [batches[0] if batches else None, counts]


def _devices(con: duckdb.DuckDBPyConnection, spans: list[Window], cut: NodeRange | None = None) -> list[str]:
    """Per span, the hash of the devices present in it, as the part's SQL sees them (lifetimes clipped to it):
    the text of (count, sum of hashes), every span in one statement; ``cut``: of that node range's devices only."""
    rows = con.execute(
        f"""
        SELECT w.i, count(d.device_id),
               sum(hash((d.device_id, d.gpu_uuid, d.node, d.gpu_model, d.kind, d.profile, d.sharing_mode, d.ge,
                         d.slices, d.cost_share, d.list_price, d.contracted_price, d.gpu_instance_id, d.multi_device,
                         d.memory_total_bytes, d.replicas,
                         greatest(coalesce(d.first_seen, w.s), w.s), least(coalesce(d.last_seen, w.e), w.e))))
                 FILTER (WHERE d.device_id IS NOT NULL)
        FROM (SELECT unnest($s) AS s, unnest($e) AS e, generate_subscripts($s, 1) AS i) w
        LEFT JOIN an_dev d ON (d.first_seen IS NULL OR d.first_seen < w.e) AND (d.last_seen IS NULL OR d.last_seen >= w.s)
                         AND {"true" if cut is None else cut.sql("d.node")}
        GROUP BY w.i
        """,  # noqa: S608 - names quoted as literals
        {"s": [w.start for w in spans], "e": [w.end for w in spans]},
    ).fetchall()
    by_span = {int(i): (n, h) for i, n, h in rows}
    return [str(by_span[i + 1]) for i in range(len(spans))]


def ensure_parts(state: RunState, span_list: list[Span], notes: dict[str, str] | None = None) -> tuple[float, list[str]]:
    """Find or compute the part of every span; returns the sample interval and the part ids (in order).

    One day is read at a time. A span whose spacing is not stored yet is read, its spacing stored, and
    its part computed at once with the interval known so far (the median of the spacings seen: exact
    when every day has the same cadence, as usual); when the window's interval, known after the last
    span, differs from that guess, the parts are computed again with it (the guessed ones, listed by
    no run, are dropped after the run). ``notes`` gets, per day computed (ISO date), why it was.
    """
    trust: list[frozenset[str]] = []  # worked out once, when the first day is read
    try:
        return _ensure_parts(state, span_list, trust, {} if notes is None else notes)
    finally:
        if trust and trust[0] and state.settings.parquet_dir is not None:  # a day's files were bound: all again
            bind_facts(state.con, state.settings.parquet_dir, tables=sorted(trust[0]))


def _ensure_parts(
    state: RunState, span_list: list[Span], trust: list[frozenset[str]], notes: dict[str, str]
) -> tuple[float, list[str]]:
    con, settings = state.con, state.settings

    def read(span: Span) -> None:
        if not trust:
            trust.append(trusted_tables(con, settings.parquet_dir))
        _read(state, span, trust[0])

    spacing: dict[str, float | None] = {
        k: v for k, v in con.execute(
            "SELECT spacing_key, spacing_seconds FROM analysis_spacings WHERE list_contains($keys, spacing_key)",
            {"keys": [s.spacing_key for s in span_list]},
        ).fetchall()
    }
    fixed = float(settings.sample_interval_seconds) if settings.sample_interval_seconds else None
    if fixed is None and any(s.nodes is not None for s in span_list):
        raise UserError("--node-ranges needs sample_interval_seconds (--config interval.yaml): a node range's "
                        "sample spacing is not its day's")
    if fixed is None and any(s.spacing_key not in spacing for s in span_list):
        for span in span_list:
            if span.spacing_key in spacing:
                continue
            read(span)
            spacing[span.spacing_key] = infer_spacing(con)
            con.execute("INSERT OR REPLACE INTO analysis_spacings VALUES (?, ?)",
                        [span.spacing_key, spacing[span.spacing_key]])
            guess = _interval(list(spacing.values()), state.window)
            state.values.interval = guess
            guessed = _part_parameters(state, guess)
            pid = span.part_id(guessed)
            if _stored(con, pid, state.arriving):
                _drop(con)
            else:
                _write_part(state, span, pid, guessed, notes)
    interval = fixed if fixed is not None else _interval([spacing.get(s.spacing_key) for s in span_list], state.window)
    state.values.interval = interval
    parameters = _part_parameters(state, interval)
    ids = []
    for span in span_list:
        pid = span.part_id(parameters)
        ids.append(pid)
        if not _stored(con, pid, state.arriving):
            with _node_scope(state, span):
                read(span)
                _write_part(state, span, pid, parameters, notes)
    return interval, ids


@contextmanager
def _node_scope(state: RunState, span: Span) -> Iterator[None]:
    """While a node range's part is computed, ``an_dev`` holds only the range's devices and the node facts'
    views only its rows; both are the fleet's again after it."""
    if span.nodes is None:
        yield
        return
    con = state.con
    con.execute("ALTER TABLE an_dev RENAME TO an_dev_fleet")
    con.execute(f"CREATE TEMP TABLE an_dev AS SELECT * FROM an_dev_fleet WHERE {span.nodes.sql()}")  # noqa: S608
    try:
        yield
    finally:
        con.execute("DROP TABLE an_dev")
        con.execute("ALTER TABLE an_dev_fleet RENAME TO an_dev")
        bind_facts(con, state.settings.parquet_dir, tables=NODE_FACTS)


PART_VERSION = 10
"""What a part holds changes with it: a part of another version is computed again (8: ``part_workloads``,
10: ``part_gpu_last``)."""


def _part_parameters(state: RunState, interval: float) -> dict[str, object]:
    s = state.settings
    return {"bucket": state.window.bucket_seconds, "threshold": s.activity_threshold, "interval": interval,
            "source": "parquet" if s.parquet_dir is not None else "store", "version": PART_VERSION,
            "trends": _trend_parameters(s.health.early_warning), "gang_kinds": sorted(s.topology.gang_kinds)}


def _trend_parameters(rules: EarlyWarningRules) -> dict[str, object]:
    """What a part's early-warning buckets depend on (``part_trend_buckets``)."""
    return {"bucket": rules.finest_trend_bucket_seconds(), "clock_drop_ratio": rules.clock_drop_ratio,
            "clock_drop_power_ratio": rules.clock_drop_power_ratio, "clock_reference": rules.clock_reference_seconds}


def _interval(spacings: list[float | None], window: Window) -> float:
    """The window's sample interval: the median of its spans' spacings, at most a bucket."""
    known = [x for x in spacings if x is not None and x > 0]
    if not known:
        return float(window.bucket_seconds)
    return float(min(median(known), window.bucket_seconds))


def _stored(con: duckdb.DuckDBPyConnection, part_id: str, arriving: frozenset[str] = frozenset()) -> bool:
    """The part is stored: listed with all its rows (or its rows are arriving for this run, ``arriving``)."""
    if part_id in arriving:
        return True
    return con.execute(
        "SELECT count(*) FROM analysis_parts WHERE part_id = ? AND part_id NOT IN (SELECT part_id FROM analysis_part_arrivals)",
        [part_id],
    ).fetchall() == [(1,)]


def _read(state: RunState, span: Span, trusted: frozenset[str] = frozenset()) -> None:
    parquet_dir = state.settings.parquet_dir
    scoped = {t: files for t, files in span.files if t in trusted}
    where = span.nodes.sql() if span.nodes is not None else None
    if where is not None:  # the range's rows of the node facts (of the day's files where those are bound below)
        bind_facts(state.con, parquet_dir, tables=[t for t in NODE_FACTS if t not in scoped], where=where)
    if scoped and parquet_dir is not None:
        for table, files in scoped.items():
            bind_fact_files(state.con, parquet_dir, {table: files}, where if table in NODE_FACTS else None)
    run_stages(RunState(state.con, state.settings, span.window, values=state.values, done=state.done,
                        nodes=span.nodes), PART_READ)


def trusted_tables(con: duckdb.DuckDBPyConnection, parquet_dir: Path | None) -> frozenset[str]:
    """The ``DAY_SCOPED`` tables whose every file under a day partition holds only that UTC day's rows, as
    the files' row-group ``ts`` statistics say (a file without them is not taken on trust): a day part of
    these reads its own day's files only. Files partitioned by another day (a local date, say) keep every
    file in every day's read."""
    listed = _parquet_files(con, parquet_dir)
    dated = [(t, f) for t in DAY_SCOPED for f in listed.get(t, []) if f.day is not None]
    if not dated:
        return frozenset()
    untrusted = set()
    for table, f in dated:
        assert f.day is not None
        day = datetime.combine(f.day, datetime.min.time())
        if not f.content.within(day, day + timedelta(days=1)):
            untrusted.add(table)
    return frozenset(t for t in DAY_SCOPED if t in FACT_TABLES) - untrusted


def _day_of(relative: str) -> date | None:
    days = [m.group(1) for p in Path(relative).parts if (m := _DAY.match(p))]
    return date.fromisoformat(days[0]) if days else None


def _drop(con: duckdb.DuckDBPyConnection) -> None:
    drop_tables(con, SAMPLE_TABLES)


def why_computed(con: duckdb.DuckDBPyConnection, span: Span, parameters: dict[str, object]) -> str:
    """Why a span has no stored part: new, or what differs from the part last computed for the same span."""
    nodes = json.loads(json.dumps(span.nodes.key)) if span.nodes is not None else None
    rows = con.execute(
        "SELECT fingerprint, parameters FROM analysis_parts WHERE part_start = ? AND part_end = ? "
        "ORDER BY created_at DESC", [span.window.start, span.window.end],
    ).fetchall()
    row = next((r for r in rows if (json.loads(r[1]) if r[1] else {}).get("nodes") == nodes), None)  # its own range
    if row is None:
        return "first analysed"
    facts, _, devices = str(row[0]).partition(":")
    reasons = []
    if facts != span.facts:
        reasons.append("its facts changed")
    if devices != span.devices:
        reasons.append("its devices changed")
    before = json.loads(row[1]) if row[1] else None
    now = json.loads(json.dumps(span.scoped(parameters), sort_keys=True, default=str))
    if before is None:
        reasons.append("computed by an earlier release that did not record its parameters")
    elif before.get("version") != now.get("version"):
        reasons.append(f"computed by another release (part version {before.get('version')}, now {now.get('version')})")
    else:
        reasons += [f"{key} {before.get(key)} -> {now.get(key)}" for key in sorted(now.keys() | before.keys())
                    if before.get(key) != now.get(key)]
    return ", ".join(reasons) or "its part was dropped"


def _write_part(
    state: RunState, span: Span, part_id: str, parameters: dict[str, object], notes: dict[str, str]
) -> None:
    """Compute and store one part in its own transaction (a half-written part is never listed)."""
    con = state.con
    notes.setdefault(span.label, why_computed(con, span, parameters))  # a guess redone: the first why
    con.execute("BEGIN TRANSACTION")
    try:
        for table in PART_ROWS:
            con.execute(f"DELETE FROM {table} WHERE part_id = ?", [part_id])  # noqa: S608 - constant names
        run_stages(RunState(con, state.settings, span.window, part_id, state.values, state.done, span.nodes), PART_WRITE)
        con.execute(
            "INSERT INTO analysis_parts VALUES (?, ?, ?, ?, ?, ?)",
            [part_id, span.window.start, span.window.end, f"{span.facts}:{span.devices}",
             datetime.now(UTC).replace(tzinfo=None), json.dumps(span.scoped(parameters), sort_keys=True, default=str)],
        )
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    _drop(con)


def merge_parts(con: duckdb.DuckDBPyConnection, part_ids: list[str],
                gang_kinds: tuple[str, ...] = TopologySettings().gang_kinds) -> None:
    """The window's sums from its parts: ``an_known``, ``an_alloc`` (isolation), ``an_lines``, ``an_workloads``,
    ``an_fleet`` (chargeback), ``an_placement_times`` and ``an_placement_runs`` (placement: the parts' keys per
    sample time added up over a day's node ranges, and their runs of pairs), ``an_health`` (health), ``an_gpu_last``
    (stranded by topology: each GPU's newest state). Every other sum is per device, GPU or node, or adds up over
    them, so a day in node ranges gives the whole day's."""
    p = {"ids": part_ids}
    con.execute(
        """CREATE OR REPLACE TEMP TABLE an_known AS
           SELECT device_id, sum(samples) AS n, sum(samples_with_activity) AS n_activity
           FROM part_devices WHERE list_contains($ids, part_id) GROUP BY device_id""", p,
    )
    con.execute(
        """CREATE OR REPLACE TEMP TABLE an_alloc AS
           SELECT DISTINCT device_id, tenant, namespace FROM part_tenancy WHERE list_contains($ids, part_id)""", p,
    )
    con.execute(
        """CREATE OR REPLACE TEMP TABLE an_workloads AS
           SELECT day, tenant, model, namespace, workload_kind, workload, state, fsum(ge_samples) AS ge_samples
           FROM part_workloads WHERE list_contains($ids, part_id) GROUP BY ALL""", p,
    )
    con.execute(
        """CREATE OR REPLACE TEMP TABLE an_lines AS
           SELECT day, tenant, state, model, ge_hours, cost_usd FROM part_lines WHERE list_contains($ids, part_id)""", p,
    )
    merge_seen(con, part_ids, gang_kinds)
    con.execute(LAST_OF_WINDOW, p)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE an_health AS SELECT * EXCLUDE (part_id) FROM part_health "
        "WHERE list_contains($ids, part_id)", p,
    )
    con.execute(
        """CREATE OR REPLACE TEMP TABLE an_fleet AS
           SELECT day, list_price, contracted_price, gpu_buckets FROM part_fleet WHERE list_contains($ids, part_id)""",
        p,
    )


@stage("day parts",
       "f_device_samples f_allocations f_allocation_claims f_gpu_samples f_gaps f_pending_demand ingest_batches an_dev "
       "analysis_parts "
       "analysis_spacings",
       "value:interval value:parts value:part_notes an_dev_fleet an_known an_alloc an_lines an_workloads an_fleet an_placement_owners an_placement_times an_placement_runs an_health an_gpu_last analysis_parts "
       "analysis_spacings idle_capacity_parts fragmentation_parts part_devices part_tenancy part_lines part_workloads part_fleet "
       "part_placement_pods part_placement_times part_placement_runs part_health part_gpu_last part_trend_buckets "
       "part_trend_quiet part_trend_gpus")
def _parts(s: RunState) -> None:
    notes: dict[str, str] = {}
    interval, ids = ensure_parts(s, spans(s.con, s.window, s.settings.parquet_dir, s.settings.node_ranges), notes)
    merge_parts(s.con, ids, s.settings.topology.gang_kinds)
    if s.settings.node_ranges > 1 and (lost := incomplete_owners(s.con, ids, s.settings.topology.gang_kinds)):
        named = ", ".join(f"{ns}/{kind}/{name} on {day:%Y-%m-%d}" for day, ns, kind, name in lost[:5])
        log.warning("%d workload(s) held 2+ GPUs in one pod in one node range and single GPUs in another, so "
                    "their placements lack the single-GPU pods (%s%s): analyse those days without --node-ranges "
                    "for them in full", len(lost), named, ", ..." if len(lost) > 5 else "")
    s.values.interval, s.values.parts, s.values.part_notes = interval, ids, notes


PARTS: Stage = _parts
"""The window's day parts, found or computed (``PART_READ`` and ``PART_WRITE`` per new part), then merged."""


def import_parts(db_path: str | Path, other: str | Path, copied: dict[str, tuple[int, float]] | None = None) -> int:
    """Copy into the store at ``db_path`` the day parts another store computed (a worker that analysed
    some days of the same facts); parts already there are kept. Returns how many parts were added; ``copied``,
    when given, gains each table's rows and seconds (added to what it holds)."""
    return sum(n for _, n in import_parts_from(db_path, [other], copied))


ARRIVING_ROWS = tuple(DAY_PARTS.values())
"""The tables whose rows of imported parts may arrive while the run goes on (:class:`RowCopy`): no stage of the
run that imports them reads them before its own rows are written (most of a merge's copy, by rows)."""


@dataclass(frozen=True)
class Arrival:
    """Parts taken from a worker's store whose ``ARRIVING_ROWS`` are still to be copied."""

    store: Path
    part_ids: tuple[str, ...]


def import_parts_from(db_path: str | Path, others: list[str | Path] | list[Path],
                      copied: dict[str, tuple[int, float]] | None = None,
                      arrivals: list[Arrival] | None = None) -> Iterator[tuple[Path, int]]:
    """:func:`import_parts` of each store of ``others`` in turn, on one connection (one checkpoint at the end,
    not one per worker: ``IMPORT_CHECKPOINT_THRESHOLD``); yields each store and how many parts it added once they
    are committed. With ``arrivals`` (a list, appended to), the ``ARRIVING_ROWS`` are left for the run to copy
    (:class:`RowCopy`, ``analyze(arrivals=...)``) and the parts are marked as arriving until then
    (``analysis_part_arrivals``): a store whose run never copied them computes those parts again, or takes them
    again from ``--parts-from``."""
    from analytics.result_tables import create_result_tables
    from collector.store_errors import connect_store

    con = connect_store(db_path, read_only=False)
    try:
        create_result_tables(con)
        defer_checkpoints(con)
        for other in others:
            yield Path(other), _import_one(con, Path(other), copied, arrivals)
        con.execute("CHECKPOINT")
    finally:
        con.close()


IMPORT_CHECKPOINT_THRESHOLD = "64GB"
"""While parts are imported, DuckDB checkpoints only at the end: at its default (16 MB of log) every worker's
commit checkpointed the whole store (8 s of 33 s for 20 workers at 1,000,000 GPUs, 3.5 s with one checkpoint).
A committed worker's parts are in the write-ahead log until then, so an interrupted import keeps them."""


def defer_checkpoints(con: duckdb.DuckDBPyConnection) -> None:
    """No checkpoint at each imported worker's commit on this store's connections: one when it closes
    (``IMPORT_CHECKPOINT_THRESHOLD``)."""
    con.execute(f"SET checkpoint_threshold = '{IMPORT_CHECKPOINT_THRESHOLD}'")

_NOT_COPIED = ("analysis_run_parts", "parquet_file_contents", "analysis_part_arrivals")
"""Part tables an import does not copy: the worker's runs, the files it looked at and its arrivals are not this
store's (spacings are added where missing)."""


def _import_one(con: duckdb.DuckDBPyConnection, other: Path, copied: dict[str, tuple[int, float]] | None,
                arrivals: list[Arrival] | None) -> int:
    """One worker's parts, in one transaction; the worker's store is attached for it, and detached after. A part
    this store holds with rows still arriving (a merge stopped before it copied them) is taken again whole."""
    from analytics.result_tables import PART_TABLES

    if not other.is_file():
        raise UserError(f"--parts-from {other}: no such store")
    try:
        con.execute("ATTACH ? AS worker (READ_ONLY)", [str(other)])
        con.execute("SELECT count(*) FROM worker.analysis_parts")
    except duckdb.Error as exc:
        con.execute("DETACH DATABASE IF EXISTS worker")
        raise UserError(f"--parts-from {other}: not a store with analysed days ({str(exc).splitlines()[0]})") from exc
    try:
        new = [r[0] for r in con.execute(
            "SELECT part_id FROM worker.analysis_parts "
            "ANTI JOIN (SELECT part_id FROM analysis_parts ANTI JOIN analysis_part_arrivals USING (part_id)) USING (part_id)"
        ).fetchall()]
        con.execute("BEGIN TRANSACTION")
        try:
            half = [r[0] for r in con.execute(
                "SELECT part_id FROM analysis_part_arrivals WHERE list_contains($new, part_id)", {"new": new}
            ).fetchall()]
            for table in PART_ROWS if half else ():  # every row of those parts, their arrival too
                con.execute(f"DELETE FROM {table} WHERE list_contains($ids, part_id)", {"ids": half})  # noqa: S608
            for table in PART_TABLES:
                if table in _NOT_COPIED or (arrivals is not None and table in ARRIVING_ROWS):
                    continue
                t0 = time.perf_counter()
                if table == "analysis_spacings":
                    row = con.execute(
                        "INSERT INTO analysis_spacings SELECT * FROM worker.analysis_spacings w "
                        "WHERE NOT EXISTS (SELECT 1 FROM analysis_spacings s WHERE s.spacing_key = w.spacing_key)"
                    ).fetchone()
                else:
                    row = con.execute(
                        f"INSERT INTO {table} SELECT * FROM worker.{table} WHERE list_contains($new, part_id)",  # noqa: S608
                        {"new": new},
                    ).fetchone()
                _count(copied, table, row[0] if row else 0, time.perf_counter() - t0)
            if arrivals is not None and new:
                con.execute("INSERT INTO analysis_part_arrivals SELECT unnest($new), $source",
                            {"new": new, "source": str(other)})
            con.execute("COMMIT")
        except duckdb.Error as exc:
            con.execute("ROLLBACK")
            raise UserError(f"--parts-from {other}: its analysed days do not fit this store "
                            f"({str(exc).splitlines()[0]})") from exc
        except BaseException:
            con.execute("ROLLBACK")
            raise
        if arrivals is not None and new:
            arrivals.append(Arrival(other, tuple(new)))
        return len(new)
    finally:
        con.execute("DETACH DATABASE IF EXISTS worker")


def import_into(con: duckdb.DuckDBPyConnection, others: list[Path], rows: RowCopy,
                copied: dict[str, tuple[int, float]] | None = None) -> Iterator[tuple[Path, int]]:
    """``--parts-from`` inside a run: each store's parts (their sums) into the run's store in turn, their
    ``ARRIVING_ROWS`` handed to ``rows`` (copied from ``RowCopy.start``); yields each store and how many parts it
    added. The caller has set ``defer_checkpoints``."""
    for other in others:
        arrivals: list[Arrival] = []
        added = _import_one(con, Path(other), copied, arrivals)
        for arrival in arrivals:
            rows.add(arrival)
        yield Path(other), added


def _count(copied: dict[str, tuple[int, float]] | None, table: str, rows: int, seconds: float) -> None:
    if copied is not None:
        before_rows, before_seconds = copied.get(table, (0, 0.0))
        copied[table] = (before_rows + rows, before_seconds + seconds)


class RowCopy:
    """The ``ARRIVING_ROWS`` of imported parts, copied on a cursor and a thread of their own while the run goes
    on, from the first worker's store imported: beside the import of the next stores' sums (which keeps one
    core busy) and the window-level stages (which leave a core mostly to Python), held between two stores while
    the run's DuckDB-heavy steps (inventory, finding and merging the parts) keep both cores (:meth:`hold`). Per
    worker's store, its rows and the end of its parts' arrival in one transaction; :meth:`wait` before the run
    lists the parts."""

    def __init__(self, con: duckdb.DuckDBPyConnection, arrivals: list[Arrival] | None = None,
                 copied: dict[str, tuple[int, float]] | None = None) -> None:
        self._con, self._copied = con, copied
        self._ids: set[str] = set()
        self._queue: queue.SimpleQueue[Arrival | None] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._go = threading.Event()
        self._go.set()
        self._pending = 0  # stores added and not yet copied (both threads change it, under ``_lock``)
        self._lock = threading.Lock()
        self._threads: int | None = None
        for arrival in arrivals or ():
            self.add(arrival)

    def add(self, arrival: Arrival) -> None:
        """Copy the rows of ``arrival`` after those added before."""
        if self._thread is None:
            row = self._con.execute("SELECT current_setting('threads')").fetchone()
            self._threads = int(row[0]) if row else None
            self._one_thread()
            self._thread = threading.Thread(target=self._run, name="gpulens-part-rows", daemon=True)
            self._thread.start()
        self._ids.update(arrival.part_ids)
        with self._lock:
            self._pending += 1
        self._queue.put(arrival)

    @property
    def part_ids(self) -> frozenset[str]:
        return frozenset(self._ids)

    def hold(self) -> None:
        """No store's rows begin to be copied until :meth:`release` (one being copied goes on to its end); the
        run's statements have every thread again."""
        self._go.clear()
        self._all_threads()

    def release(self) -> None:
        """Copy again from the next store on."""
        if self._pending:
            self._one_thread()
        self._go.set()

    def _one_thread(self) -> None:
        """While rows are copied beside the run, DuckDB keeps one thread fewer: its threads and the copy's own
        then match the cores (on 2 cores the run's and the copy's statements each keep one, so neither slows the
        run's Python stages), not one thread more than there are cores (0.94x the merge at 1,000,000 GPUs)."""
        if self._threads and self._threads > 1:
            self._con.execute(f"SET threads = {self._threads - 1}")

    def _all_threads(self) -> None:
        """The run's statements have DuckDB's threads as set before the copy."""
        if self._threads and self._threads > 1:
            self._con.execute(f"SET threads = {self._threads}")

    def wait(self) -> None:
        """Until every row is copied (the rest on every thread); raises what stopped the copy (a ``UserError``
        naming the store)."""
        self.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def join(self) -> None:
        """Until the copy ends, whatever its outcome (before the store is closed)."""
        if self._thread is not None:
            self._all_threads()
            self._go.set()
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        cursor = self._con.cursor()
        n = 0
        try:
            while (arrival := self._queue.get()) is not None:
                self._go.wait()
                if self._error is None:  # after a failure the rest stay arriving: not stored
                    self._copy_one(cursor, f"gpulens_rows_{n}", arrival)
                with self._lock:
                    self._pending -= 1
                n += 1
        finally:
            cursor.close()

    def _copy_one(self, cursor: duckdb.DuckDBPyConnection, alias: str, arrival: Arrival) -> None:
        try:
            self._copy(cursor, alias, arrival)
        except duckdb.Error as exc:
            self._error = UserError(f"--parts-from {arrival.store}: the rows of its analysed days could not be copied "
                                    f"({str(exc).splitlines()[0]}); run the merge again")
        except BaseException as exc:  # noqa: BLE001 - handed to the run's thread by wait()
            self._error = exc

    def _copy(self, cursor: duckdb.DuckDBPyConnection, alias: str, arrival: Arrival) -> None:
        ids = {"ids": list(arrival.part_ids)}
        cursor.execute(f"ATTACH ? AS {alias} (READ_ONLY)", [str(arrival.store)])  # alias: our constant
        try:
            cursor.execute("BEGIN TRANSACTION")
            try:
                for table in ARRIVING_ROWS:
                    t0 = time.perf_counter()
                    row = cursor.execute(
                        f"INSERT INTO {table} SELECT * FROM {alias}.{table} WHERE list_contains($ids, part_id)", ids,  # noqa: S608
                    ).fetchone()
                    _count(self._copied, table, row[0] if row else 0, time.perf_counter() - t0)
                cursor.execute("DELETE FROM analysis_part_arrivals WHERE list_contains($ids, part_id)", ids)
                cursor.execute("COMMIT")
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
        finally:
            cursor.execute(f"DETACH DATABASE IF EXISTS {alias}")
