"""`gpulens demo`: the whole pipeline on a simulated fleet, on this machine, in about a minute."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulens.cli.flag_errors import number
from gpulens.core.errors import UserError

if TYPE_CHECKING:
    from exporter.server import ExporterHandle
    from gpulens.sim.fleet import SimulatedFleet

DEMO_HELP = """Run gpulens end to end on a simulated fleet (no GPU, no cluster needed).

Steps: start one live exporter per simulated node on loopback; scrape them once into
DIR/gpulens.duckdb and print who holds what; backfill --days of history in virtual time; analyze
idle capacity, fragmentation, isolation risk, health, placement by topology and chargeback; recommend
quotas and a MIG layout (dry-run YAML in DIR/recommendations/); plan every ClusterQueue's quota together
(dry-run YAML in DIR/plan/) and show what an n+1 reserve on the dedicated pools too would do;
decide the quarantine of failing GPUs (dry run, DIR/remediation/); write the HTML report to
DIR/report/index.html; end with one line per decision.

The store, report and dry-run YAML in DIR are replaced on every run (DIR/remediation/ gets this run's
files); nothing else there is touched.
"""

_OUTPUTS = ("gpulens.duckdb", "gpulens.duckdb.wal")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _step(n: int, total: int, message: str) -> None:
    _say(f"\n[{n}/{total}] {message}")


def register(app: typer.Typer) -> None:
    @app.command(help=DEMO_HELP)
    def demo(
        out: Annotated[Path, typer.Option("--out", help="Folder for the store, report and YAML.")] = Path(
            "gpulens-demo"
        ),
        scenario: Annotated[
            Path | None, typer.Option("--scenario", help="Scenario YAML (default: the built-in fleet).")
        ] = None,
        days: Annotated[float, typer.Option("--days", callback=number(ge=0.1, le=90, unit="days"), help="Days of history to backfill.")] = 14,
        step: Annotated[str, typer.Option("--step", help="Sample step of the backfill (e.g. 60s, 5m).")] = "5m",
        serve: Annotated[
            bool,
            typer.Option("--serve/--no-serve", help="Keep the live exporters serving after the demo until Ctrl-C."),
        ] = False,
    ) -> None:
        from collector.store_errors import storage_failures

        with storage_failures(out / "gpulens.duckdb"):  # a full disk under --out: one line naming the store
            run_demo(out=out, scenario_path=scenario, days=days, step=step, serve=serve)


def run_demo(*, out: Path, scenario_path: Path | None, days: float, step: str, serve: bool) -> None:
    """Run every stage of the pipeline, printing progress and the headline results."""
    from gpulens.core.timeparse import parse_duration

    step_seconds = parse_duration(step, what="--step")
    from gpulens.sim.fleet import SimulatedFleet
    from gpulens.sim.scenario_file import load_scenario

    scenario = load_scenario(scenario_path)
    fleet = SimulatedFleet(scenario)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create the folder: {exc.strerror or exc}") from exc
    db = out / "gpulens.duckdb"
    for name in _OUTPUTS:
        (out / name).unlink(missing_ok=True)
    total = 8
    began = time.perf_counter()

    _step(1, total, f"starting {len(fleet.node_names())} simulated exporters on loopback")
    exporters = _start_exporters(fleet)
    try:
        for handle in exporters:
            _say(f"  {handle.node:<24} {handle.url}/metrics")
        _step(2, total, "scraping the live exporters into " + str(db))
        _scrape_and_show(db, [h.url + "/metrics" for h in exporters])

        _step(3, total, f"backfilling {days:g} days of history at {step} in virtual time")
        _backfill(db, fleet, days, step_seconds)

        _step(4, total, "analyzing idle capacity, fragmentation, isolation risk, health, placement, chargeback")
        _analyze(db, out)

        _step(5, total, "recommending quotas (dry run)")
        decided = _recommend(db, out / "recommendations")

        _step(6, total, "planning every ClusterQueue's quota together (dry run)")
        decided[1:1] = _plan(db, out)

        _step(7, total, "deciding the quarantine of failing GPUs (dry run)")
        decided.insert(3, _quarantine(db, out / "remediation"))

        _step(8, total, "writing the report")
        from dashboards.report.writer import write_report

        report = write_report(db, out / "report")
        _say("\nWhat the loop decided on this fleet:")
        for line in decided:
            _say(f"  - {line}")
        _say(f"\nDone in {time.perf_counter() - began:.0f} s.")
        _say(f"  report:     {report.resolve()}  (open it in a browser)")
        _say(f"  store:      {db.resolve()}")
        prog = _program()
        _say(f"  dashboard:  {prog} dashboard --db {db}")
        _say(f"  exporter:   {prog} exporter --backend sim --listen 127.0.0.1:9400   (then curl :9400/metrics)")
        if serve:
            _say("\nExporters keep serving (Ctrl-C to stop):")
            for handle in exporters:
                _say(f"  {handle.url}/metrics")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                _say("stopping")
    finally:
        for handle in exporters:
            handle.stop()


def _program() -> str:
    """How the user can run gpulens again: the script that runs now (e.g. ``.venv/bin/gpulens``)."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "gpulens" and argv0.exists():
        resolved = argv0.resolve()
        try:
            return str(resolved.relative_to(Path.cwd()))
        except ValueError:
            return str(resolved)
    return "gpulens"


def _start_exporters(fleet: SimulatedFleet) -> list[ExporterHandle]:
    from exporter.server import serve_in_thread
    from exporter.settings import ExporterSettings

    handles: list[ExporterHandle] = []
    try:
        for node in fleet.node_names():
            source = fleet.source(node)
            handles.append(
                serve_in_thread(
                    ExporterSettings(listen="127.0.0.1:0"),
                    device_source=source,
                    allocation_source=source,
                    node=node,
                    backend="sim",
                )
            )
    except BaseException:
        for h in handles:
            h.stop()
        raise
    return handles


def _scrape_and_show(db: Path, urls: list[str]) -> None:
    from analytics.tenant_snapshot import current_holdings, render_holdings
    from collector.scrape import scrape_once
    from collector.store_errors import connect_store, reading_store

    summary = scrape_once(str(db), urls)
    for error in summary.errors:
        _say(f"  scrape error: {error}")
    _say(f"  {summary.samples} samples from {len(urls)} exporters -> {summary.rows} rows")
    with connect_store(db, read_only=True) as con, reading_store(db):
        holdings = current_holdings(con)
    _say("\nWho holds what right now (all nodes, latest scrape):\n")
    print(render_holdings(holdings), flush=True)


def _backfill(db: Path, fleet: SimulatedFleet, days: float, step_seconds: float) -> None:
    from collector.backfill import ChunkProgress, backfill_simulated

    end = (time.time() // step_seconds) * step_seconds
    start = end - days * 86400

    def progress(p: ChunkProgress) -> None:
        _say(f"  chunk {p.index}/{p.total}: {p.rows:,} rows in {p.seconds:.1f} s")

    summary = backfill_simulated(str(db), fleet=fleet, start=start, end=end, step=step_seconds, progress=progress)
    _say(f"  {summary.total_rows:,} rows in {summary.seconds:.1f} s")


def _analyze(db: Path, out: Path) -> None:
    from analytics.run import analyze
    from analytics.settings import AnalysisSettings

    summary = analyze(db, AnalysisSettings(out_dir=out / "chargeback"))
    print(summary.render(), flush=True)
    from analytics.placement.text import render_placement

    print("\n" + render_placement(db), flush=True)


def _recommend(db: Path, out_dir: Path) -> list[str]:
    """Recommend quotas and a MIG layout; the lines of the quota cut and of the layout."""
    from analytics.miglayout.run import layout_for_recommendations, write_layout_files
    from analytics.recommend import recommend, write_dry_run
    from gpulens.cli.demo_loop import cut_line, layout_line

    report = recommend(db)
    print(report.render(), flush=True)
    written = write_dry_run(report, out_dir)
    _say(f"  {len(written)} YAML files in {out_dir} (apply with `gpulens recommend --db ... --apply`)")
    layout = layout_for_recommendations(db, report.window_start, report.window_end, report.workloads)
    print(layout.render(), flush=True)
    files = write_layout_files(layout, out_dir)
    _say(f"  {len(files)} MIG layout and workload files in {out_dir}/mig and {out_dir}/workloads (never applied: "
         "see mig/README.md)")
    return [cut_line(report), layout_line(layout)]


def _plan(db: Path, out: Path) -> list[str]:
    """The quota plan under the default policy, recorded for the report, and its what-if; their lines."""
    from analytics.plan.policy import PlanPolicy
    from analytics.plan.render import render_plan
    from gpulens.cli.demo_loop import plan_line, plan_quotas, what_if_line, what_if_n_plus_1_everywhere

    plan, written = plan_quotas(db, PlanPolicy(), out / "plan")
    print(render_plan(plan), flush=True)
    _say(f"  again with `gpulens plan --db {db}`")
    return [plan_line(plan, written, out / "plan"), what_if_line(what_if_n_plus_1_everywhere(db, plan))]


def _quarantine(db: Path, out_dir: Path) -> str:
    """`remediate` as a dry run; its line."""
    from gpulens.cli.demo_loop import quarantine, quarantine_line

    report, written = quarantine(db, out_dir)
    print(report.render(), flush=True)
    _say(f"  {len(written)} file(s) in {out_dir} (apply with `gpulens remediate --db ... --apply`)")
    return quarantine_line(report)
