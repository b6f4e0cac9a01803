"""Errors a user can act on: the CLI prints their message on one line and exits non-zero."""

from __future__ import annotations


class UserError(Exception):
    """Bad input (flag, file, config, unreachable endpoint): reported as one clear line, never a trace."""

    exit_code = 2
    brief: str | None = None
    """The same for a browser (the dashboard): short, without this machine's paths; None: the message is fit."""
