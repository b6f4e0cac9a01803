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
        trusted_user_header: Annotated[
            str | None,
            typer.Option("--trusted-user-header", help="Header with the signed-in user, set by the authenticating "
                                                       "proxy in front of the app (e.g. X-Forwarded-Email). Turns on "
                                                       "per-tenant views; needs the two options below."),
        ] = None,
        trusted_groups_header: Annotated[
            str | None,
            typer.Option("--trusted-groups-header", help="Header with the user's groups, comma-separated "
                                                         "(e.g. X-Forwarded-Groups)."),
        ] = None,
        access_file: Annotated[
            Path | None,
            typer.Option("--access-file", help="YAML file: admin_groups (see every tenant) and groups "
                                               "(group: [tenant, ...]). Others get a 'no access' page."),
        ] = None,
    ) -> None:
        """Serve the Streamlit app: fleet capacity states, tenants, isolation risk, recommendations, health.

        Replaces itself with `streamlit run` on the bundled app, which serves until interrupted (Ctrl-C).
        The store is opened read-only per query, so collect/analyze can keep writing it. Pages whose
        analysis has not run yet say which command to run.

        Behind an authenticating proxy (oauth2-proxy), the three access options make every page show only
        the caller's tenants. Trust those headers only from the proxy: keep the app on 127.0.0.1 next to it.
        """
        import os
        import sys

        from gpulens.analytics.report.data import StoreReader
        from gpulens.dashboards.streamlit.access import load_access_file, trusted_headers_from
        from gpulens.dashboards.streamlit.launch import streamlit_command

        given = {"--trusted-user-header": trusted_user_header, "--trusted-groups-header": trusted_groups_header,
                 "--access-file": None if access_file is None else str(access_file)}
        trusted = trusted_headers_from([a for flag, value in given.items() if value for a in (flag, value)], {})
        if trusted is not None:
            load_access_file(trusted.access_file)  # fail now, with one line, on a bad access file
            if host not in ("127.0.0.1", "::1", "localhost"):
                typer.echo(f"gpulens dashboard: warning: --host {host} lets clients reach the app without the proxy "
                           f"and send their own {trusted.user} header; keep it on 127.0.0.1 behind the proxy", err=True)

        reader = StoreReader.open(db)  # fail early, with one line, on a missing, busy or foreign file
        try:
            reader.require_store()
        finally:
            reader.close()
        command = streamlit_command(db, port=port, host=host, trusted=trusted)
        typer.echo(f"gpulens dashboard: serving {db} on http://{host}:{port} (Ctrl-C stops it)")
        sys.stdout.flush()
        sys.stderr.flush()
        # become streamlit: signals (Ctrl-C, SIGTERM from a supervisor) reach the server directly
        os.execv(command[0], command)
