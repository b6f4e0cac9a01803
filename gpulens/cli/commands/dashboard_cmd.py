"""`gpulens dashboard`: the Streamlit app on a store, read-only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add the `dashboard` command to `app`."""

    @app.command()
    def dashboard(
        db: Annotated[Path, typer.Option("--db", help="The gpulens store (DuckDB file) to show; opened read-only.")],
        port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port to serve the app on.")] = 8501,
        host: Annotated[
            str, typer.Option("--host", help="Address to listen on (0.0.0.0 exposes the app to the network).")
        ] = "127.0.0.1",
    ) -> None:
        """Serve the Streamlit app: fleet capacity states, tenants, isolation risk, recommendations, health.

        Replaces itself with `streamlit run` on the bundled app, which serves until interrupted (Ctrl-C).
        The store is opened read-only per query, so collect/analyze can keep writing it. Pages whose
        analysis has not run yet say which command to run.
        """
        import os
        import sys

        from gpulens.analytics.report.data import StoreReader
        from gpulens.dashboards.streamlit.launch import streamlit_command

        reader = StoreReader.open(db)  # fail early, with one line, on a missing, busy or foreign file
        try:
            reader.require_store()
        finally:
            reader.close()
        command = streamlit_command(db, port=port, host=host)
        typer.echo(f"gpulens dashboard: serving {db} on http://{host}:{port} (Ctrl-C stops it)")
        sys.stdout.flush()
        sys.stderr.flush()
        # become streamlit: signals (Ctrl-C, SIGTERM from a supervisor) reach the server directly
        os.execv(command[0], command)
