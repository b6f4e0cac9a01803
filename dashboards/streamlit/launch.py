"""How the app is started and how it finds its store: `--db PATH` after `--`, or ``GPULENS_DB``."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dashboards.streamlit.access import TrustedHeaders

APP_PATH = Path(__file__).with_name("app.py")
DB_ENV = "GPULENS_DB"
PAGES = (
    ("views/fleet.py", "Fleet capacity", ":material/monitoring:"),
    ("views/tenants.py", "Tenants", ":material/groups:"),
    ("views/risk.py", "Isolation risk", ":material/shield:"),
    ("views/recommendations.py", "Recommendations", ":material/tune:"),
    ("views/plan.py", "Quota plan", ":material/balance:"),
    ("views/health.py", "Health", ":material/health_and_safety:"),
    ("views/placement.py", "Placement", ":material/hub:"),
)
"""The app's pages: script (relative to app.py), title and icon, in navigation order."""


def streamlit_command(db: Path, *, port: int, host: str, trusted: TrustedHeaders | None = None) -> list[str]:
    """The argv that serves the app on ``db`` (a list: no shell ever sees the path), with its access options."""
    access = [] if trusted is None else [
        "--trusted-user-header", trusted.user, "--trusted-groups-header", trusted.groups,
        "--access-file", str(trusted.access_file.resolve()),
        *(arg for net in trusted.proxies for arg in ("--trusted-proxy", str(net))),
    ]
    return [
        sys.executable, "-m", "streamlit", "run", str(APP_PATH),
        "--server.port", str(port),
        "--server.address", host,
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
        "--client.toolbarMode", "viewer",
        "--client.showErrorDetails", "none",  # an unexpected error: a generic message, its trace only in the log
        "--",
        "--db", str(db.resolve()),
        *access,
    ]


def streamlit_environment(environ: Mapping[str, str], trusted: TrustedHeaders | None) -> dict[str, str]:
    """The app's environment. With trusted proxies, the server reports each connection's own peer: uvicorn
    would otherwise replace a loopback peer by the address its ``X-Forwarded-For`` header claims."""
    env = dict(environ)
    if trusted is not None and trusted.proxies:
        env["FORWARDED_ALLOW_IPS"] = ""  # trust no forwarding header for the peer address
    return env


def db_path_from(argv: Sequence[str], environ: dict[str, str] | os._Environ[str]) -> str | None:
    """The store path given as ``--db PATH`` / ``--db=PATH`` in ``argv``, else ``$GPULENS_DB``, else None."""
    for i, arg in enumerate(argv):
        if arg == "--db" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--db="):
            return arg.removeprefix("--db=")
    return environ.get(DB_ENV) or None
