"""Which flags the user gave: a config file's value stands unless the command line names that flag.

A typer option always has a value (its default when not typed), so merging every flag over a file
silently undoes the file (``window_seconds: 7d`` became the ``--window`` default, 14 days). Click
records where each value came from; only typed (or environment) values override the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import typer

from gpulens.cli.flag_errors import Flag

_GIVEN = frozenset({"COMMANDLINE", "ENVIRONMENT", "PROMPT"})
"""Where a value came from when the user gave it (click's ``ParameterSource`` names; typer carries its own click)."""


def given_flags(ctx: typer.Context, values: Mapping[str, Any], flags: Mapping[str, Flag]) -> dict[str, Any]:
    """The entries of ``values`` (keyed by settings field, like ``flags``) whose flag the user gave."""
    param_of = {opt: param.name for param in ctx.command.params for opt in param.opts}
    return {field: value for field, value in values.items()
            if getattr(ctx.get_parameter_source(param_of[flags[field].name] or ""), "name", None) in _GIVEN}
