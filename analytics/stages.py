"""The stages of ``analyze``, in order, each declaring the tables it reads and the tables it writes.

A stage hands the next ones temp tables (``an_*``, dropped with the connection), stored day-part
tables (``*_parts``, ``part_*``) or Python values (``value:<name>``: the typed attribute ``<name>`` of
:class:`~analytics.run_values.RunValues`, which a stage reads or sets only as it declares);
facts are read only through the ``f_*`` views of :mod:`analytics.facts`, dimensions and
bookkeeping straight from the store. Three groups: a day part's stages (``PART_READ``, then
``PART_WRITE``; :mod:`analytics.day_parts` runs them per UTC day of the window), the
window-level stages (``WINDOW``, after the parts are merged) and the writes of the run (``WRITE``).
The declared order is the run's order: :func:`check_order` proves that every stage reads only what
the store holds or an earlier stage wrote, and a test checks each module's SQL against the declarations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb

from analytics import chargeback, fragmentation, gpu_day, health, idle, isolation
from analytics.facts import FACT_VIEWS, Window
from analytics.node_ranges import NodeRange
from analytics.placement.run import assess as assess_placement
from analytics.placement.run import insert_placement
from analytics.placement.seen import insert_seen
from analytics.placement.stranded import insert_part_last
from analytics.result_tables import PART_TABLES
from analytics.run_values import PREFIX, RunValues
from analytics.settings import AnalysisSettings
from collector.schema import BOOKKEEPING, DIMENSIONS

STORE_TABLES = frozenset({*DIMENSIONS, *BOOKKEEPING, *PART_TABLES})
"""What a stage may read without an earlier stage: dimensions, bookkeeping and the day parts earlier runs
stored (facts only as ``f_*``)."""


@dataclass
class RunState:
    """What one run's stages share: the connection, the window, the settings and the values they compute."""

    con: duckdb.DuckDBPyConnection
    settings: AnalysisSettings
    window: Window
    run_id: str = ""
    values: RunValues = field(default_factory=RunValues)
    done: Callable[[str], None] = field(default=lambda _name: None)
    """The phase clock: called with a stage's name when it ends."""
    nodes: NodeRange | None = None
    """A day part's node range (``analytics/node_ranges.py``; None: every node)."""
    arriving: frozenset[str] = frozenset()
    """Parts whose rows this run is still copying from workers' stores (``day_parts.RowCopy``): stored for it."""


@dataclass(frozen=True)
class Stage:
    """One step of a run: its name (a phase in ``AnalysisSummary.phase_seconds``), what it reads, what it writes."""

    name: str
    reads: frozenset[str]
    writes: frozenset[str]
    run: Callable[[RunState], None]


def stage(name: str, reads: str, writes: str) -> Callable[[Callable[[RunState], None]], Stage]:
    """Declare a stage: ``reads`` and ``writes`` are space-separated table names (``value:x`` for the value
    ``RunState.values.x``)."""

    def wrap(fn: Callable[[RunState], None]) -> Stage:
        return Stage(name, frozenset(reads.split()), frozenset(writes.split()), fn)

    return wrap


@stage("read samples and allocations", "f_device_samples f_allocations f_allocation_claims f_gaps an_dev",
       "an_gaps an_held an_hold an_kb an_kb_held an_kb_unlisted an_known an_alloc")
def _samples(s: RunState) -> None:
    idle.prepare_samples(s.con, s.window, s.settings.activity_threshold)


PART_READ: tuple[Stage, ...] = (_samples,)
"""What a day part reads from the facts (its span is ``RunState.window``); its spacing follows from ``an_kb``."""


@stage("device buckets", "an_kb an_dev value:interval", "an_life an_db an_gpub")
def _device_buckets(s: RunState) -> None:
    idle.build_device_buckets(s.con, s.window, s.values.interval)


@stage("write idle_capacity", "an_hold an_alloc an_db an_dev an_gpub value:interval", "idle_capacity_parts")
def _write_idle(s: RunState) -> None:
    idle.insert_idle(s.con, s.run_id, s.window, s.values.interval)


@stage("write fragmentation", "f_pending_demand f_quota_snapshots f_pod_snapshots an_models an_dev an_addable an_db an_gpub",
       "fragmentation_parts")
def _write_fragmentation(s: RunState) -> None:
    fragmentation.insert_fragmentation(s.con, s.run_id, s.window)


@stage("part sums", "an_known an_alloc an_hold an_db an_gpub an_dev idle_capacity_parts",
       "part_devices part_tenancy part_lines part_workloads part_fleet")
def _part_sums(s: RunState) -> None:
    p = {"part_id": s.run_id}
    s.con.execute("INSERT INTO part_devices SELECT $part_id, device_id, n, n_activity FROM an_known", p)
    s.con.execute("INSERT INTO part_tenancy SELECT $part_id, device_id, tenant, namespace FROM an_alloc", p)  # rows distinct
    chargeback.insert_part_inputs(s.con, s.run_id, s.window)
    chargeback.insert_part_workloads(s.con, s.run_id, s.window)


SAMPLE_TABLES = ("an_gaps", "an_hold", "an_kb", "an_kb_unlisted", "an_known", "an_alloc", "an_life", "an_db", "an_gpub")
"""What a part's read and its device buckets leave for the idle, fragmentation and sum stages."""


@stage("free the samples' tables", " ".join(SAMPLE_TABLES), "")
def _free_samples(s: RunState) -> None:
    """Their last reader is done: dropped before the placement and health stages, the part's memory peak (at
    100,000 GPUs they hold about 1 GB), not after the part."""
    drop_tables(s.con, SAMPLE_TABLES)


def drop_tables(con: duckdb.DuckDBPyConnection | None, tables: tuple[str, ...]) -> None:
    """Drop these temp tables where they exist."""
    if con is not None:
        for t in tables:
            con.execute(f"DROP TABLE IF EXISTS {t}")  # noqa: S608 - constant names


@stage("placements seen", "f_allocation_claims f_pod_snapshots devices",
       "part_placement_pods part_placement_times part_placement_runs an_seen_claims an_seen_owners")
def _placements_seen(s: RunState) -> None:
    insert_seen(s.con, s.run_id, s.window, s.settings.topology)  # a whole day or a node range: what adds up


@stage("GPU health seen", "f_gpu_samples f_allocation_claims",
       "an_clock_ref an_gpu_day an_trend_gpus part_health part_trend_buckets part_trend_quiet part_trend_gpus "
       "part_gpu_last")
def _health_seen(s: RunState) -> None:
    with gpu_day.built(s.con, s.window):  # one grouping of the span's GPU samples for both
        health.insert_part_health_from_day(s.con, s.run_id, s.window, s.settings.health)
        insert_part_last(s.con, s.run_id, s.window)


PART_WRITE: tuple[Stage, ...] = (
    _device_buckets, _write_idle, _write_fragmentation, _part_sums, _free_samples, _placements_seen, _health_seen,
)
"""What a day part computes and stores (``RunState.run_id`` is the part id), after what it read."""


@stage("health", "an_dev an_health part_trend_buckets part_trend_quiet part_trend_gpus value:parts f_events "
       "f_gpu_samples",
       "an_health_window an_health_quiet value:health")
def _health(s: RunState) -> None:
    s.values.health = health.assess(s.con, s.window, s.settings.health, s.values.parts)


@stage("isolation risk",
       "an_alloc an_dev an_known f_events f_namespace_snapshots nodes tenants ingest_batches",
       "an_risk_pairs an_risk_held an_risk_gpus an_risk_places an_risk_kinds an_risk_kind_rows value:risks")
def _isolation(s: RunState) -> None:
    s.values.risks = isolation.assess(s.con, s.window, s.settings.risk, s.settings.health)


@stage("placement",
       "an_placement_times an_placement_runs an_gpu_last f_pending_demand gpus "
       "gpu_topology nodes an_models value:interval",
       "value:placement value:topology_stranded")
def _placement(s: RunState) -> None:
    s.values.placement, s.values.topology_stranded = assess_placement(s.con, s.window, s.values.interval,
                                                                      s.settings.topology)


WINDOW: tuple[Stage, ...] = (_health, _isolation, _placement)
"""Window-level stages, after the day parts are merged, before the run's transaction."""


@stage("list the run's parts", "value:parts", "analysis_run_parts idle_capacity fragmentation")
def _write_parts(s: RunState) -> None:
    s.con.execute(
        "INSERT INTO analysis_run_parts SELECT $run, $start, $end, unnest($ids)",
        {"run": s.run_id, "start": s.window.start, "end": s.window.end, "ids": s.values.parts},
    )


@stage("write risk, health, placement",
       "an_risk_kinds an_risk_kind_rows an_health_quiet value:risks value:health value:placement value:topology_stranded",
       "isolation_risk health placement topology_stranded")
def _write_findings(s: RunState) -> None:
    isolation.insert_risk(s.con, s.run_id, s.window, s.values.risks)
    health.insert_health(s.con, s.run_id, s.window, s.values.health)
    insert_placement(s.con, s.run_id, s.window, s.values.placement, s.values.topology_stranded)


@stage("write chargeback", "an_lines an_fleet an_workloads an_dev f_namespace_snapshots value:model_prices",
       "chargeback value:fleet")
def _write_chargeback(s: RunState) -> None:
    s.values.fleet = chargeback.insert_chargeback(
        s.con, s.run_id, s.window, s.values.model_prices,
        s.settings.mig_proration, s.settings.unallocated,
    )


WRITE: tuple[Stage, ...] = (_write_parts, _write_findings, _write_chargeback)
"""Stages that write the run's result rows, inside its transaction (after its previous rows are deleted)."""

SETUP_WRITES = frozenset(
    {*FACT_VIEWS, "an_profiles", "an_models", "an_dev", "an_addable", "value:model_prices"}
)
"""What ``run.py`` makes before the stages: the ``f_*`` views, the priced inventory and its prices."""

PART_SETUP = frozenset({*SETUP_WRITES, "value:interval"})
"""What a day part's stages find: the setup's, and the window's interval (decided from the spans' spacings)."""


def check_order(stages: tuple[Stage, ...], given: frozenset[str] = SETUP_WRITES) -> None:
    """Raise ``ValueError`` when a stage reads what neither the store, the setup nor an earlier stage wrote,
    or declares a value that :class:`RunValues` does not hold."""
    have = set(given) | STORE_TABLES
    for st in stages:
        unknown = sorted({n for n in st.reads | st.writes if n.startswith(PREFIX)} - RunValues.names())
        if unknown:
            raise ValueError(f"stage {st.name!r} declares {unknown}, which are not values of RunValues")
        missing = sorted(st.reads - have)
        if missing:
            raise ValueError(f"stage {st.name!r} reads {missing}, which no earlier stage writes")
        have |= st.writes


def run_stages(state: RunState, stages: tuple[Stage, ...]) -> None:
    """Run ``stages`` in order; ``state.done(name)`` is called after each (the phase clock)."""
    for st in stages:
        before = _temp_tables(state.con)
        with state.values.open_to(st.name, st.reads, st.writes):  # an undeclared value is refused as it is touched
            st.run(state)
        undeclared = (_temp_tables(state.con) - before) - st.writes
        if undeclared:
            raise ValueError(f"stage {st.name!r} made undeclared tables {sorted(undeclared)}")
        unset = sorted({n for n in st.writes if n.startswith(PREFIX)} - state.values.set_names())
        if unset:
            raise ValueError(f"stage {st.name!r} declares it writes {unset} but did not set them")
        state.done(st.name)



def _temp_tables(con: duckdb.DuckDBPyConnection | None) -> set[str]:
    """The connection's temp tables (a stage may only leave behind the ones it declares)."""
    if con is None:
        return set()
    return {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = 'temp'").fetchall()}
