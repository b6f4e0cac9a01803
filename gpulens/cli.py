"""The ``gpulens`` command line. Each sub-command lives in ``gpulens/commands/`` and registers itself."""

from __future__ import annotations

import sys

import typer

from gpulens import __version__
from gpulens.commands import COMMAND_MODULES
from gpulens.errors import UserError

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
        typer.echo(f"gpulens {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """gpulens command line."""


for _module in COMMAND_MODULES:
    _module.register(app)


def run() -> None:
    """Entry point that turns ``UserError`` into a one-line message and a non-zero exit."""
    try:
        app(standalone_mode=True)
    except UserError as exc:
        print(f"gpulens: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    run()
