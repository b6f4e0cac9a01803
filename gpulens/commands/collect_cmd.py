"""`gpulens collect`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `collect` command to `app` (not written yet)."""
