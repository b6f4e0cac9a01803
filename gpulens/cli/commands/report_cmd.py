"""`gpulens report`: the self-contained HTML report with its CSV and Parquet files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add the `report` command to `app`."""

    @app.command()
    def report(
        db: Annotated[Path, typer.Option("--db", help="The gpulens store (DuckDB file) to report on; read-only.")],
        out: Annotated[Path, typer.Option("--out", help="Directory to write index.html, CSV and Parquet into.")],
        run_id: Annotated[
            str | None,
            typer.Option("--run-id", help="Analysis run to show (see analysis_runs); default: the newest run."),
        ] = None,
    ) -> None:
        """Write a self-contained HTML report (charts inline, works offline), the FOCUS chargeback as CSV
        and Parquet, and a per-tenant CSV into OUT. Sections whose analysis has not run yet say which
        command to run. The header names the run shown (window, bucket, activity threshold, price
        source) and notes parameters that are not the defaults.
        """
        from gpulens.analytics.report import write_report

        index = write_report(db, out, run_id=run_id)
        typer.echo(f"report written: {index}")
        typer.echo(f"open it in a browser: file://{index.resolve()}")
