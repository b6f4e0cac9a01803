"""`gpulens analyze`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `analyze` command to `app` (not written yet)."""
