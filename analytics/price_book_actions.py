"""What ``gpulens prices`` does to the store's price book: set a price, show the book, import a FOCUS bill."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb

from analytics.focus_prices import instance_table, parse_mapping, read_focus_prices
from analytics.prices import (
    Price,
    in_force,
    load_price_book,
    record_price,
    stored_prices,
    unpriced_line,
)
from collector.schema import connect, create_schema
from collector.store_errors import connect_store, reading_store
from gpulens.core.mig_catalog import short_model


def _writable(db: Path) -> duckdb.DuckDBPyConnection:
    """The store at ``db`` opened for writing (created if missing: prices may come before the first collection)."""
    if not db.exists():
        return connect(str(db))
    con = connect_store(db, read_only=False)
    create_schema(con, str(db))
    return con


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def set_price(db: Path, model: str, usd: float, paid: float | None, source: str,
              valid_from: datetime | None, valid_to: datetime | None) -> str:
    """Record one price; the sentence says what the book now holds for the model."""
    price = Price(short_model(model), usd, paid, source, valid_from, valid_to)
    with _writable(db) as con, reading_store(db):
        replaced = record_price(con, price, _now())
    return f"{'replaced' if replaced else 'added'} in the price book of {db}: {price.describe()}"


def store_models(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The GPU model names the store's inventory uses (as stored: NVML names or short ones)."""
    rows = con.execute(
        "SELECT DISTINCT gpu_model FROM devices WHERE gpu_model IS NOT NULL "
        "UNION SELECT DISTINCT gpu_model FROM gpus WHERE gpu_model IS NOT NULL ORDER BY 1"
    ).fetchall()
    return [str(r[0]) for r in rows]


def show(db: Path, at: datetime) -> str:
    """The prices in force at ``at`` (packaged ones labelled), the store's unpriced models, every stored entry."""
    with connect_store(db, read_only=True) as con, reading_store(db):
        book = load_price_book(con, None, at)
        models = store_models(con)
        entries = stored_prices(con)
    lines = [f"price book of {db} at {at:%Y-%m-%d %H:%M} UTC (USD per whole-GPU hour; MIG: the slice share):"]
    lines += [f"  {p.describe()}" for _, p in sorted(book.prices.items())]
    lines += [f"  {unpriced_line(m)}" for m in book.unpriced(models)]
    current = {id(p) for p in in_force(entries, at).values()}
    if entries:
        lines.append("stored entries (newest first per model; * = in force):")
        lines += [f"  {'*' if id(p) in current else ' '} {p.describe()}" for p in entries]
    return "\n".join(lines)


def import_focus(db: Path, bill: Path, mappings: list[str], valid_to: datetime | None) -> str:
    """Price each GPU model the bill covers at its effective cost per GPU-hour; say what was and was not used."""
    table = instance_table(dict(parse_mapping(m) for m in mappings))
    read = read_focus_prices(bill, table)
    lines = [f"FOCUS bill {bill}: {read.rows} row(s)"]
    if not read.models:
        lines.append("  no GPU instance usage found: the price book is unchanged "
                     "(add instance types with --instance-type TYPE=COUNTxMODEL)")
    else:
        with _writable(db) as con, reading_store(db):
            for m in read.models:
                price = m.price(bill.name, valid_to)
                replaced = " (replaces the entry of the same validity)" if record_price(con, price, _now()) else ""
                lines.append(f"  {price.describe()}: {m.gpu_hours:,.1f} GPU-hours, effective "
                             f"${m.effective_usd:,.2f}{replaced}")
    for itype, usd in sorted(read.unmapped_usd.items()):
        lines.append(f"  not priced: usage of {itype} (${usd:,.2f}) names no GPU instance type gpulens knows"
                     + ("" if itype.startswith("(") else " (--instance-type TYPE=COUNTxMODEL if it has GPUs)"))
    if read.unused_commitment_usd:
        lines.append(f"  unused commitment ${read.unused_commitment_usd:,.2f}: paid, bought no GPU-hour, "
                     "not in any price")
    return "\n".join(lines)
