"""`gpulens analyze`."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

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
}
"""The settings field each flag feeds (errors name the flag, in its unit)."""


def register(app: typer.Typer) -> None:
    """Add the `analyze` command to `app`."""

    @app.command("analyze")
    def analyze(
        db: Annotated[Path, typer.Option("--db", help="The store (DuckDB file) to analyse.")] = Path("gpulens.duckdb"),
        window: Annotated[str, typer.Option(help="Length of the analysed window, e.g. 7d, 24h.")] = "14d",
        bucket: Annotated[str, typer.Option(help=(
            "Time bucket of the stored rows (per device and bucket; fragmentation per node and bucket); must "
            "divide a day (1m, 5m, 15m, 1h). Idle is decided per sample, so the bucket moves no idle figure; "
            "finer buckets give finer detail and cost more (5m: about 1.8x the CPU of 1h)."))] = "1h",
        end: Annotated[
            str | None, typer.Option(help="Window end (ISO 8601, UTC if no offset); default: the last complete bucket of the data (never after the newest sample's interval, never in the future).")
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
            str, typer.Option(help="Price a MIG instance by compute 'slices' or by 'memory'.")
        ] = "slices",
        unallocated: Annotated[
            str, typer.Option(help="Unallocated cost: 'own-line', or shared 'even' / 'proportional' between tenants.")
        ] = "own-line",
        parquet: Annotated[
            Path | None, typer.Option(help="Read fact tables from Hive-partitioned Parquet here (<dir>/<table>/...).")
        ] = None,
        out: Annotated[
            Path | None, typer.Option(help="Write the FOCUS chargeback as CSV and Parquet into this folder.")
        ] = None,
        config: Annotated[
            Path | None, typer.Option(help="YAML with further settings (risk weights, health rules); flags override it.")
        ] = None,
        parts_from: Annotated[
            list[Path] | None,
            typer.Option(
                "--parts-from",
                help="Before analysing, copy the analysed days of another store (a worker that analysed some days "
                "of the same facts with the same parameters); repeatable.",
            ),
        ] = None,
    ) -> None:
        """Idle capacity, fragmentation, isolation risk, health and FOCUS chargeback for one window.

        Writes the tables idle_capacity, fragmentation, isolation_risk, health and chargeback into
        the store (the same window and parameters replace their earlier rows) and prints the
        headline numbers. docs/analytics.md explains every column and default.
        """
        from pydantic import ValidationError

        from gpulens.analytics.run import analyze as run_analysis
        from gpulens.analytics.settings import AnalysisSettings
        from gpulens.cli.flag_errors import describe_flag_errors
        from gpulens.collector.store_errors import storage_failures
        from gpulens.core.config import load_yaml_model

        base = load_yaml_model(config, AnalysisSettings).model_dump() if config else {}
        try:
            end_ts = datetime.fromisoformat(end.replace("Z", "+00:00")) if end else None
        except ValueError as exc:
            raise UserError(f"--end {end!r} is not an ISO 8601 time") from exc
        flags = {
            "window_seconds": window,
            "bucket_seconds": bucket,
            "end": end_ts,
            "activity_threshold": activity_threshold,
            "prices_path": prices,
            "mig_proration": mig_proration,
            "unallocated": unallocated,
            "parquet_dir": parquet,
            "out_dir": out,
        }
        try:
            settings = AnalysisSettings.model_validate({**base, **flags})
        except ValidationError as exc:
            raise UserError(describe_flag_errors(exc, FLAGS)) from exc
        with storage_failures(db):  # a damaged block, a full disk: one line naming the store
            if parts_from:
                from gpulens.analytics.day_parts import import_parts

                for worker in parts_from:
                    typer.echo(f"{import_parts(db, worker)} analysed day(s) copied from {worker}")
            summary = run_analysis(db, settings)
        typer.echo(summary.render())
        if out is not None:
            typer.echo(f"FOCUS chargeback written to {out}/chargeback_focus.csv and .parquet")
