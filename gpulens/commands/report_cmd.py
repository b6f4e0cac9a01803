"""`gpulens report`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `report` command to `app` (not written yet)."""
