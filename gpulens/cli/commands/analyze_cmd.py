"""`gpulens analyze`."""

from __future__ import annotations

import glob
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from analytics.cost_rules import MIG_PRORATIONS, UNALLOCATED_SHARING
from analytics.focus_formats import FOCUS_FORMATS, chosen
from gpulens.cli.flag_errors import Flag, duration, finite
from gpulens.core.errors import UserError

FLAGS = {
    "window_seconds": duration("--window"),
    "bucket_seconds": duration("--bucket", "1m, 5m, 15m, 1h"),
    "end": Flag("--end"),
    "activity_threshold": Flag("--activity-threshold"),
    "prices_path": Flag("--prices"),
    "mig_proration": Flag("--mig-proration"),
    "unallocated": Flag("--unallocated"),
    "parquet_dir": Flag("--parquet"),
    "out_dir": Flag("--out"),
    "focus_formats": Flag("--format"),
    "node_ranges": Flag("--node-ranges"),
    "memory_limit": Flag("--memory-limit"),
}
"""The settings field each flag feeds (errors name the flag, in its unit)."""


def register(app: typer.Typer) -> None:
    """Add the `analyze` command to `app`."""

    @app.command("analyze")
    def analyze(
        ctx: typer.Context,
        db: Annotated[Path, typer.Option("--db", help="The store (DuckDB file) to analyse.")] = Path("gpulens.duckdb"),
        window: Annotated[str, typer.Option(help="Length of the analysed window, e.g. 7d, 24h.")] = "14d",
        bucket: Annotated[str, typer.Option(help=(
            "Time bucket of the stored rows (per device and bucket; fragmentation per node and bucket); must "
            "divide a day (1m, 5m, 15m, 1h). Idle is decided per sample, so the bucket moves no idle figure; "
            "finer buckets give finer detail and cost more (5m: about 1.8x the CPU of 1h)."))] = "1h",
        end: Annotated[
            str | None, typer.Option(help="Window end (ISO 8601, UTC if no offset; Unix seconds; now-1h); default: the last complete bucket of the data (never after the newest sample's interval, never in the future).")
        ] = None,
        activity_threshold: Annotated[
            float, typer.Option(callback=finite, help="Allocated devices below this activity ratio (0..1) count as allocated-idle.")
        ] = 0.05,
        prices: Annotated[
            Path | None,
            typer.Option(help="Prices YAML (models: {H200: {list_usd_per_gpu_hour: 3.5}}) laid over the price book for "
                              "this run only (the stored book is unchanged; see gpulens prices). Default: the book "
                              "(gpulens prices set / import-focus) over the packaged list prices; a model in none "
                              "is unpriced."),
        ] = None,
        mig_proration: Annotated[
            str, typer.Option(help=f"How a MIG instance's share of its GPU is priced: {MIG_PRORATIONS.help()}.")
        ] = "slices",
        unallocated: Annotated[
            str, typer.Option(help=f"Where unallocated cost goes: {UNALLOCATED_SHARING.help()}.")
        ] = "own-line",
        parquet: Annotated[
            Path | None, typer.Option(help="Read fact tables from Hive-partitioned Parquet here (<dir>/<table>/...).")
        ] = None,
        out: Annotated[
            Path | None, typer.Option(help="Write the FOCUS chargeback into this folder (every --format).")
        ] = None,
        formats: Annotated[
            list[str] | None,
            typer.Option("--format", help=f"With --out: a FOCUS file format, repeatable: {FOCUS_FORMATS.help()}; "
                                          "default: every one."),
        ] = None,
        config: Annotated[
            Path | None, typer.Option(help="YAML with any analysis setting (window_seconds, risk weights, health rules); a flag typed overrides it.")
        ] = None,
        parts_from: Annotated[
            list[Path] | None,
            typer.Option(
                "--parts-from",
                help="Before analysing, copy the analysed days of another store (a worker that analysed some days "
                "of the same facts with the same parameters), of every *.duckdb store in a folder, or of every store a "
                "pattern matches (e.g. '/data/workers/*.duckdb'); repeatable. Their sums come first, their idle and "
                "fragmentation rows while the run goes on; a day whose rows a stopped merge did not copy is taken "
                "again (or computed) by the next run.",
            ),
        ] = None,
        slice_: Annotated[
            str | None,
            typer.Option(
                "--slice",
                help="Analyse only this worker's days of the window, INDEX/COUNT (day k goes to worker k mod COUNT), "
                "each as a one-day run; without --end the window ends at the last UTC midnight. A Kubernetes Indexed Job passes $(JOB_COMPLETION_INDEX)/COUNT; "
                "the central store then merges them with --parts-from (docs/architecture.md).",
            ),
        ] = None,
        node_ranges: Annotated[
            int,
            typer.Option(
                "--node-ranges",
                help="Cut each day into this many ranges of the fleet's nodes (by name), a part each, for fleets too "
                "large for one worker a day: with --slice I/N the window's (day, range) parts go to the workers "
                "(part k = day x RANGES + range, to worker k mod N), each computing its parts only; the central run "
                "takes them with the same --node-ranges and --parts-from. Needs sample_interval_seconds (--config).",
            ),
        ] = 1,
        memory_limit: Annotated[
            str,
            typer.Option(
                "--memory-limit",
                help="DuckDB's memory limit (3GB, 1536MB, 512MiB); beyond it the analysis spills to disk next to "
                "the store. The rows are the same under any limit: 3GB keeps a run under the 4 GiB the manifests give "
                "an analysis pod; 1536MB under 2 GiB at about 1.13x the time (one day of 100,000 GPUs, "
                "docs/performance.md); a merge of many workers' parts may need more.",
            ),
        ] = "3GB",
        dimensions_from: Annotated[
            Path | None,
            typer.Option(
                "--dimensions-from",
                help="With --slice: first make --db a copy of this (central) store without its fact rows; the facts "
                "are read from --parquet.",
            ),
        ] = None,
    ) -> None:
        """Idle capacity, fragmentation, isolation risk, health and FOCUS chargeback for one window.

        Writes the tables idle_capacity, fragmentation, isolation_risk, health and chargeback into
        the store (the same window and parameters replace their earlier rows) and prints the
        headline numbers. docs/analytics.md explains every column and default.
        """
        from pydantic import ValidationError

        from analytics.run import analyze as run_analysis
        from analytics.settings import AnalysisSettings
        from collector.store_errors import storage_failures
        from gpulens.cli.flag_errors import describe_flag_errors
        from gpulens.cli.given_flags import given_flags
        from gpulens.core.config import load_yaml_model

        base = load_yaml_model(config, AnalysisSettings).model_dump() if config else {}
        flags = given_flags(ctx, {
            "window_seconds": window,
            "bucket_seconds": bucket,
            "end": end,
            "activity_threshold": activity_threshold,
            "prices_path": prices,
            "mig_proration": mig_proration,
            "unallocated": unallocated,
            "parquet_dir": parquet,
            "out_dir": out,
            "focus_formats": tuple(FOCUS_FORMATS.check(f, "--format") for f in formats) if formats else None,
            "node_ranges": node_ranges,
            "memory_limit": memory_limit,
        }, FLAGS)
        try:
            settings = AnalysisSettings.model_validate({**base, **flags})
        except ValidationError as exc:
            raise UserError(describe_flag_errors(exc, FLAGS)) from exc
        if dimensions_from is not None and slice_ is None:
            raise UserError("--dimensions-from is for a worker: give --slice INDEX/COUNT too")
        with storage_failures(db):  # a damaged block, a full disk: one line naming the store
            if slice_ is not None:
                from analytics.slices import Slice, analyze_slice, copy_dimensions

                part = Slice.parse(slice_)
                if parts_from:
                    raise UserError("--parts-from is for the central store, --slice for a worker: give one of them")
                if dimensions_from is not None:
                    typer.echo(f"{copy_dimensions(dimensions_from, db)} table(s) copied from {dimensions_from} "
                               "(its fact rows left out)")
                if settings.node_ranges > 1:
                    from analytics.run import compute_parts
                    from analytics.slices import analyze_ranges

                    done = analyze_ranges(db, settings, part, compute_parts, lambda: datetime.now(UTC))
                    typer.echo(f"slice {part.index}/{part.count}: {len(done)} part(s) of days in "
                               f"{settings.node_ranges} node ranges analysed into {db}")
                    for p in done:
                        typer.echo(f"  {p.label}: part {p.part_id} {'stored already' if p.why is None else p.why}")
                    return
                runs = analyze_slice(db, settings, part, run_analysis, lambda: datetime.now(UTC))
                typer.echo(f"slice {part.index}/{part.count}: {len(runs)} day(s) analysed into {db}")
                for run in runs:
                    typer.echo(f"  {run.window_start:%Y-%m-%d %H:%M} .. {run.window_end:%Y-%m-%d %H:%M} UTC: run {run.run_id}")
                return
            summary = run_analysis(  # the parts' idle and fragmentation rows are copied while the run goes on
                db, settings, parts_from=_stores(parts_from) if parts_from else [],
                imported=lambda worker, added: typer.echo(f"{added} analysed day(s) copied from {worker}"),
            )
        typer.echo(summary.render())
        if settings.out_dir is not None:
            names = [f.path(settings.out_dir).name for f in chosen(settings.focus_formats)]
            typer.echo(f"FOCUS chargeback written to {settings.out_dir}: {', '.join(names)}")


def _stores(paths: list[Path]) -> list[Path]:
    """``--parts-from`` paths: a store, every ``*.duckdb`` store in a folder, or every store a pattern (``*``,
    ``?``, ``[``) matches, sorted. A pattern may match none yet (workers that have not run): it says so."""
    out: list[Path] = []
    for path in paths:
        if any(c in str(path) for c in "*?["):
            found = sorted(Path(p) for p in glob.glob(str(path)))
            if not found:
                typer.echo(f"no store matches {path} yet: no analysed day copied from there")
            out += found
        elif path.is_dir():
            found = sorted(path.glob("*.duckdb"))
            if not found:
                raise UserError(f"--parts-from {path}: the folder holds no *.duckdb store")
            out += found
        else:
            out.append(path)
    return out
