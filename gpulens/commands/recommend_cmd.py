"""`gpulens recommend`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `recommend` command to `app` (not written yet)."""
