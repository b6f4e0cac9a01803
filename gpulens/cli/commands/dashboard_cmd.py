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
        trusted_proxy: Annotated[
            list[str] | None,
            typer.Option("--trusted-proxy", help="Address or CIDR of the authenticating proxy (repeatable): the "
                                                 "headers are read only from requests whose peer it is. Needed "
                                                 "with the access options on a non-loopback --host."),
        ] = None,
    ) -> None:
        """Serve the Streamlit app: fleet capacity states, tenants, isolation risk, recommendations, health.

        Replaces itself with `streamlit run` on the bundled app, which serves until interrupted (Ctrl-C).
        The store is opened read-only per query, so collect/analyze can keep writing it. Pages whose
        analysis has not run yet say which command to run.

        Behind an authenticating proxy (oauth2-proxy), the three access options make every page show only
        the caller's tenants (also read from GPULENS_TRUSTED_USER_HEADER, GPULENS_TRUSTED_GROUPS_HEADER,
        GPULENS_ACCESS_FILE). The headers are trusted only from the proxy: keep the app on 127.0.0.1 next to
        it, or name the proxy with --trusted-proxy (GPULENS_TRUSTED_PROXIES, comma-separated); on any other
        address without it the command refuses to start.
        """
        import os
        import sys

        from dashboards.report.data import StoreReader
        from dashboards.streamlit.access import (
            PROXY_FLAG,
            load_access_file,
            require_safe_listen,
            trusted_headers_from,
        )
        from dashboards.streamlit.launch import streamlit_command, streamlit_environment

        given = {"--trusted-user-header": trusted_user_header, "--trusted-groups-header": trusted_groups_header,
                 "--access-file": None if access_file is None else str(access_file)}
        argv = [a for flag, value in given.items() if value for a in (flag, value)]
        argv += [a for proxy in trusted_proxy or () for a in (PROXY_FLAG, proxy)]
        trusted = trusted_headers_from(argv, os.environ)  # the app reads the same environment
        require_safe_listen(host, trusted)
        if trusted is not None:
            load_access_file(trusted.access_file)  # fail now, with one line, on a bad access file

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
        os.execve(command[0], command, streamlit_environment(os.environ, trusted))
