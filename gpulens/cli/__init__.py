"""The ``gpulens`` command line. Each sub-command lives in ``gpulens/cli/commands/`` and registers itself."""

from __future__ import annotations

import logging
import sys

import typer

from gpulens.cli.commands import COMMAND_MODULES
from gpulens.core.errors import UserError
from gpulens.core.own_packages import own_packages_message
from gpulens.core.version import describe

app = typer.Typer(
    name="gpulens",
    help=(
        "GPU visibility for shared Kubernetes clusters: per-tenant and per-MIG metrics, idle capacity, "
        "isolation risk, chargeback and quota recommendations."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(describe())
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and the commit it was built from."),
) -> None:
    """gpulens command line."""


for _module in COMMAND_MODULES:
    _module.register(app)


class _Notes(logging.Handler):
    """Prints what the store's migrations changed (logger ``gpulens.store``) and what an analysis says beside its
    results (``gpulens.analytics``) as ``gpulens: note: ...``."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"gpulens: note: {record.getMessage()}", file=sys.stderr, flush=True)


def _say_store_upgrades() -> None:
    for name in ("gpulens.store", "gpulens.analytics"):
        notes = logging.getLogger(name)
        if not any(isinstance(h, _Notes) for h in notes.handlers):
            notes.addHandler(_Notes())
        notes.setLevel(logging.INFO)


def run() -> None:
    """Entry point that turns ``UserError`` and bad flags into a one-line message and a non-zero exit."""
    _say_store_upgrades()
    clash = own_packages_message()
    if clash:
        print(f"gpulens: error: {clash}", file=sys.stderr)
        sys.exit(2)
    try:
        result = app(standalone_mode=False)
    except UserError as exc:
        print(f"gpulens: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except OSError as exc:  # a path the user gave that cannot be used (domain code missed it): still one line
        if exc.filename is None:
            raise
        print(f"gpulens: error: cannot use {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        sys.exit(2)
    except typer.Abort:
        print("gpulens: aborted", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as exc:  # usage errors of typer's bundled click: one line, no usage box
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())
            sys.exit(0)
        format_message = getattr(exc, "format_message", None)
        message = " ".join(str(format_message() if format_message else exc).split())
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        print(f"gpulens: error: {message}{hint}", file=sys.stderr)
        sys.exit(int(getattr(exc, "exit_code", 2)))
    sys.exit(result if isinstance(result, int) else 0)
