"""`gpulens prices`: the one price book every command that prints or decides money reads."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from gpulens.core.errors import UserError

DB = typer.Option("--db", help="The store (DuckDB file) that holds the price book.")


def _time(flag: str, text: str | None) -> datetime | None:
    """An ISO 8601 flag value as naive UTC (UTC if no offset); a bad one is a UserError naming the flag."""
    if text is None:
        return None
    try:
        ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise UserError(f"{flag} {text!r} is not an ISO 8601 date or time (e.g. 2026-12-01)") from exc
    return ts.astimezone(UTC).replace(tzinfo=None) if ts.tzinfo else ts


def _usd(flag: str, value: float | None) -> float | None:
    if value is not None and not (value >= 0 and value < float("inf")):
        raise UserError(f"{flag} must be a number of US dollars, 0 or more (got {value})")
    return value


def register(app: typer.Typer) -> None:
    """Add `prices set|show|import-focus|rules` to `app`."""
    prices = typer.Typer(
        name="prices", no_args_is_help=True,
        help="The price book: USD per whole-GPU hour per GPU model, each price with its source and validity. "
             "analyze, recommend, plan, report and the dashboards all price with it; MIG instances cost their "
             "slice share. A model without a price is 'unpriced' (no dollar figure, never a guess).",
    )
    app.add_typer(prices)

    @prices.command("set")
    def set_price(
        model: Annotated[str, typer.Option("--model", help="GPU model, e.g. H200 (NVML names such as 'NVIDIA H200' "
                                                           "are shortened).")],
        usd_per_gpu_hour: Annotated[float, typer.Option("--usd-per-gpu-hour", help="List (on-demand) USD per "
                                                                                 "whole-GPU hour.")],
        db: Annotated[Path, DB] = Path("gpulens.duckdb"),
        paid_usd_per_gpu_hour: Annotated[float | None, typer.Option(
            "--paid-usd-per-gpu-hour", help="What you actually pay (contract, amortized cost); default: the list "
                                            "price.")] = None,
        valid_from: Annotated[str | None, typer.Option(help="First day the price holds (ISO 8601, UTC); default: "
                                                            "always.")] = None,
        valid_to: Annotated[str | None, typer.Option(help="Day the price stops holding (exclusive); default: "
                                                          "open-ended.")] = None,
        source: Annotated[str, typer.Option(help="Where the price comes from, shown next to every figure it "
                                                 "makes.")] = "set by gpulens prices set",
    ) -> None:
        """Set one model's price (replaces the entry of the same model and validity)."""
        from analytics.price_book_actions import set_price as run

        start, end = _time("--valid-from", valid_from), _time("--valid-to", valid_to)
        if start and end and end <= start:
            raise UserError(f"--valid-to {valid_to} is not after --valid-from {valid_from}")
        typer.echo(run(db, model, _usd("--usd-per-gpu-hour", usd_per_gpu_hour) or 0.0,
                       _usd("--paid-usd-per-gpu-hour", paid_usd_per_gpu_hour), source, start, end))

    @prices.command("show")
    def show(
        db: Annotated[Path, DB] = Path("gpulens.duckdb"),
        at: Annotated[str | None, typer.Option(help="Show the prices in force at this time (ISO 8601); default: "
                                                    "now.")] = None,
    ) -> None:
        """The price in force per model (with its source), the models of the store without one, every entry."""
        from analytics.price_book_actions import show as run

        typer.echo(run(db, _time("--at", at) or datetime.now(UTC).replace(tzinfo=None)))

    @prices.command("import-focus")
    def import_focus(
        bill: Annotated[Path, typer.Argument(help="A FOCUS 1.2/1.3 cost and usage export (.csv, .csv.gz or "
                                                  ".parquet).")],
        db: Annotated[Path, DB] = Path("gpulens.duckdb"),
        instance_type: Annotated[list[str] | None, typer.Option(
            "--instance-type", help="Add or override an instance type's GPUs: TYPE=COUNTxMODEL, e.g. "
                                    "gpu-h200-8=8xH200 (repeatable).")] = None,
        valid_to: Annotated[str | None, typer.Option(help="Day the imported prices stop holding; default: "
                                                          "open-ended (until a newer bill or price).")] = None,
    ) -> None:
        """Effective USD per GPU-hour per model from a cloud bill (commitment discounts included) into the book;
        the share bought under a commitment splits idle cost into committed (already paid) and on demand."""
        from analytics.price_book_actions import import_focus as run

        typer.echo(run(db, bill, instance_type or [], _time("--valid-to", valid_to)))

    @prices.command("rules")
    def rules(
        out: Annotated[Path, typer.Option("--out", help="Prometheus rules file to write (YAML).")],
        db: Annotated[Path, DB] = Path("gpulens.duckdb"),
    ) -> None:
        """Write the book as Prometheus recording rules gpulens:price_usd_per_gpu_hour{gpu_model, model} (the
        price paid), which the Grafana chargeback dashboard prices with; load them next to gpulens' rules."""
        from dashboards.grafana.price_rules import write_price_rules

        typer.echo(write_price_rules(db, out))
