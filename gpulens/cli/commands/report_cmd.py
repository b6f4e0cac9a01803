"""`gpulens report`: the self-contained HTML report with its CSV and Parquet files, for the fleet or per tenant."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpulens.cli.flag_errors import number


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
        tenant: Annotated[
            str | None,
            typer.Option("--tenant", help="Report for this tenant only: its devices, costs, recommendations, risk "
                                          "and health; other tenants never appear by name."),
        ] = None,
        per_tenant: Annotated[
            bool,
            typer.Option("--per-tenant", help="Write OUT/<tenant>/ (report, CSV, Parquet) for every tenant, and "
                                              "OUT/index.html listing them for the platform team."),
        ] = False,
        grid_gco2_per_kwh: Annotated[
            float,
            typer.Option("--grid-gco2-per-kwh", callback=number(ge=0),
                         help="Grid carbon intensity for the CO2e of each tenant's energy, in gCO2e per kWh "
                              "(default: 480, the world average of 2023; use your region's or supplier's)."),
        ] = 480.0,
    ) -> None:
        """Write a self-contained HTML report (charts inline, works offline), the FOCUS chargeback as CSV
        and Parquet, and a per-tenant CSV into OUT. Sections whose analysis has not run yet say which
        command to run. The header names the run shown (window, bucket, activity threshold, price
        source) and notes parameters that are not the defaults. With --tenant or --per-tenant, each
        report shows one tenant only (showback).
        """
        from collector.store_errors import storage_failures
        from gpulens.core.errors import UserError

        if tenant is not None and per_tenant:
            raise UserError("--tenant and --per-tenant cannot be used together: pick one")
        with storage_failures(db):  # a damaged block of the store: one line naming it
            _write(db, out, run_id, tenant, per_tenant, grid_gco2_per_kwh)


def _write(db: Path, out: Path, run_id: str | None, tenant: str | None, per_tenant: bool, grid: float) -> None:
    """Write the fleet report, one tenant's, or every tenant's with their index, and say where."""
    if per_tenant:
        from dashboards.report.tenant_reports import write_per_tenant_reports

        index, reports = write_per_tenant_reports(db, out, run_id=run_id, grid_gco2_per_kwh=grid)
        typer.echo(f"{len(reports)} tenant reports written under {out}; the platform team's index: {index}")
        typer.echo(f"open it in a browser: file://{index.resolve()}")
        return
    if tenant is not None:
        from dashboards.report.tenant_reports import write_tenant_report

        index = write_tenant_report(db, out, tenant, run_id=run_id, grid_gco2_per_kwh=grid)
    else:
        from dashboards.report import write_report

        index = write_report(db, out, run_id=run_id, grid_gco2_per_kwh=grid)
    typer.echo(f"report written: {index}")
    typer.echo(f"open it in a browser: file://{index.resolve()}")
