"""`gpulens exporter`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `exporter` command to `app` (not written yet)."""
