"""The price book: USD per whole-GPU hour per GPU model, each price with its source and validity.

One book serves every command that prints or decides money. It is the store's ``price_book`` rows
(``gpulens prices set``, ``gpulens prices import-focus``) over the packaged list prices (source
``list price (packaged)``); ``analyze --prices FILE`` lays a file over it for that run. A model that
none of them names is *unpriced*: its money is NULL, never zero and never a guessed default. MIG
instances are priced by their share of the GPU (``analytics/inventory.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, ConfigDict, Field

from collector.schema_version import has_table
from gpulens.core.config import load_yaml_model, parse_yaml_model
from gpulens.core.mig_catalog import short_model

PACKAGED = "list price (packaged)"
"""The source of the packaged prices: illustrative list prices that any price a user sets overrides."""
UNPRICED = "unpriced"


class ModelPrice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    list_usd_per_gpu_hour: float = Field(ge=0)
    contracted_usd_per_gpu_hour: float | None = Field(None, ge=0)


class PriceFile(BaseModel):
    """The prices YAML: ``models: {H200: {list_usd_per_gpu_hour: 3.5}}``, optionally a price for any other model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: str = "USD"
    models: dict[str, ModelPrice] = {}
    fallback_usd_per_gpu_hour: float | None = Field(None, ge=0)


@dataclass(frozen=True)
class Price:
    """One model's price per whole-GPU hour, where it comes from and when it holds (None: open-ended)."""

    model: str
    usd_per_gpu_hour: float
    """List (on-demand) price."""
    contracted_usd_per_gpu_hour: float | None
    """What is actually paid (a contract or a bill's effective cost); None: the list price."""
    source: str
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    committed_share: float | None = None
    """Share (0..1) of the model's GPU-hours bought under a commitment (a FOCUS bill says); None: not known."""

    @property
    def paid(self) -> float:
        return self.usd_per_gpu_hour if self.contracted_usd_per_gpu_hour is None else self.contracted_usd_per_gpu_hour

    def describe(self) -> str:
        paid = ("" if self.contracted_usd_per_gpu_hour in (None, self.usd_per_gpu_hour)
                else f", paid ${usd(self.contracted_usd_per_gpu_hour)}")
        valid = ""
        if self.valid_from or self.valid_to:
            valid = f", valid {_day(self.valid_from) or '...'} .. {_day(self.valid_to) or '...'}"
        committed = "" if self.committed_share is None else f", {100 * self.committed_share:.0f}% committed"
        return f"{self.model}: ${usd(self.usd_per_gpu_hour)} per GPU-hour list{paid} ({self.source}{valid}{committed})"


def usd(value: float) -> str:
    """A unit price: up to 4 decimals, no trailing zeros (``5``, ``1.5``, ``8.6975``)."""
    return f"{value:,.4f}".rstrip("0").rstrip(".")


def _day(ts: datetime | None) -> str:
    return "" if ts is None else f"{ts:%Y-%m-%d}"


@dataclass(frozen=True)
class PriceBook:
    """The price in force of each model (short name), and where the book came from."""

    prices: Mapping[str, Price]
    origin: str
    fallback: Price | None = None
    """A price for any model the book does not name: only where a prices file states one."""
    notes: tuple[str, ...] = field(default=())

    def price_of(self, model: str | None) -> Price | None:
        short = short_model(model)
        found = self.prices.get(short)
        if found is None and self.fallback is not None and short:
            return replace(self.fallback, model=short)
        return found

    def list_for(self, model: str | None) -> float | None:
        p = self.price_of(model)
        return None if p is None else p.usd_per_gpu_hour

    def contracted_for(self, model: str | None) -> float | None:
        p = self.price_of(model)
        return None if p is None else p.paid

    def source_for(self, model: str | None) -> str:
        p = self.price_of(model)
        return UNPRICED if p is None else p.source

    def unpriced(self, models: Iterable[str | None]) -> list[str]:
        return sorted({short_model(m) for m in models if m and self.price_of(m) is None})

    def lines(self, models: Iterable[str | None]) -> list[str]:
        """One line per model: its price and source, or that it is unpriced (its money is not counted)."""
        out = []
        for m in sorted({short_model(x) for x in models if x}):
            p = self.price_of(m)
            out.append(p.describe() if p else unpriced_line(m))
        return out

    def as_json(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "models": {m: _price_json(p) for m, p in sorted(self.prices.items())},
            "fallback": None if self.fallback is None else _price_json(self.fallback),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PriceBook:
        fallback = data.get("fallback")
        return cls(
            {m: _price_from(p) for m, p in data.get("models", {}).items()},
            str(data.get("origin", "")),
            None if not fallback else _price_from(fallback),
        )


def unpriced_line(model: str) -> str:
    return (f"{model}: unpriced (no price in the book; its money is not counted: "
            f"gpulens prices set --model {model} --usd-per-gpu-hour ...)")


def _price_json(p: Price) -> dict[str, Any]:
    data = asdict(p)
    data["valid_from"] = None if p.valid_from is None else p.valid_from.isoformat()
    data["valid_to"] = None if p.valid_to is None else p.valid_to.isoformat()
    return data


def _price_from(data: Mapping[str, Any]) -> Price:
    def ts(v: object) -> datetime | None:
        return None if not v else datetime.fromisoformat(str(v))

    return Price(
        str(data["model"]), float(data["usd_per_gpu_hour"]),
        None if data.get("contracted_usd_per_gpu_hour") is None else float(data["contracted_usd_per_gpu_hour"]),
        str(data["source"]), ts(data.get("valid_from")), ts(data.get("valid_to")),
        None if data.get("committed_share") is None else float(data["committed_share"]),
    )


def packaged_prices() -> dict[str, Price]:
    """The packaged list prices (``analytics/default_prices.yaml``), labelled as such."""
    text = resources.files("analytics").joinpath("default_prices.yaml").read_text(encoding="utf-8")
    file = parse_yaml_model(text, PriceFile, origin="analytics/default_prices.yaml")
    return _file_prices(file, PACKAGED)


def _file_prices(file: PriceFile, source: str) -> dict[str, Price]:
    return {
        short_model(k): Price(short_model(k), v.list_usd_per_gpu_hour, v.contracted_usd_per_gpu_hour, source)
        for k, v in file.models.items()
    }


BOOK_COLUMNS = "gpu_model, usd_per_gpu_hour, contracted_usd_per_gpu_hour, source, valid_from, valid_to, committed_share"


def stored_prices(con: duckdb.DuckDBPyConnection) -> list[Price]:
    """Every row of the store's ``price_book``, newest first per model (a store opened read-only before its
    migration: its ``prices`` table)."""
    if not has_table(con, "price_book"):
        if not has_table(con, "prices"):
            return []
        legacy = con.execute(
            "SELECT gpu_model, usd_per_gpu_hour, contracted_usd_per_gpu_hour FROM prices ORDER BY ALL"
        ).fetchall()
        return [Price(short_model(str(m)), float(u), c, "store prices table") for m, u, c in legacy]
    rows = con.execute(
        f"SELECT {BOOK_COLUMNS} FROM price_book "  # noqa: S608 - fixed columns
        "ORDER BY gpu_model, valid_from DESC NULLS LAST, recorded_at DESC"
    ).fetchall()
    return [Price(short_model(str(r[0])), float(r[1]), r[2], str(r[3]), r[4], r[5], r[6]) for r in rows]


def in_force(prices: Iterable[Price], at: datetime | None) -> dict[str, Price]:
    """Per model, the price that holds at ``at`` (None: now, or any time): the latest start, then the latest set."""
    out: dict[str, Price] = {}
    for p in prices:  # newest first per model
        holds = at is None or ((p.valid_from is None or p.valid_from < at) and (p.valid_to is None or p.valid_to >= at))
        if holds and p.model not in out:
            out[p.model] = p
    return out


def load_price_book(
    con: duckdb.DuckDBPyConnection, path: Path | None, at: datetime | None = None
) -> PriceBook:
    """The store's book in force at ``at`` over the packaged list prices; a prices file at ``path`` on top."""
    book = dict(packaged_prices())
    stored = in_force(stored_prices(con), at)
    book.update(stored)
    origin = "price book" if stored else "packaged list prices"
    if path is None:
        return PriceBook(book, origin)
    file = load_yaml_model(path, PriceFile)
    source = f"prices file {path}, this run"
    book.update(_file_prices(file, source))
    fallback = None
    if file.fallback_usd_per_gpu_hour is not None:  # a price the user states beats a packaged one
        fallback = Price("", file.fallback_usd_per_gpu_hour, None, f"{source}, fallback")
        book = {m: p for m, p in book.items() if p.source != PACKAGED}
    return PriceBook(book, f"prices file {path} over the {origin}", fallback,
                     (f"prices from {path} are used for this run only (the stored book is unchanged)",))


def run_price_book(con: duckdb.DuckDBPyConnection) -> PriceBook:
    """The book the newest analysis run priced with (what its money shows); the store's book without a run."""
    if has_table(con, "analysis_runs"):
        row = con.execute(
            "SELECT run_id, json_extract(parameters, '$.price_book') FROM analysis_runs "
            "ORDER BY created_at DESC, window_end DESC LIMIT 1"
        ).fetchone()
        if row and row[1]:
            book = PriceBook.from_json(json.loads(str(row[1])))
            return replace(book, origin=f"{book.origin}, as analysis run {row[0]} priced")
    return load_price_book(con, None)


def record_price(con: duckdb.DuckDBPyConnection, price: Price, recorded_at: datetime) -> bool:
    """Put ``price`` in the store's book, replacing the row of the same model and validity; True: it replaced one."""
    key = [price.model, price.valid_from, price.valid_to]
    where = "gpu_model = ? AND valid_from IS NOT DISTINCT FROM ? AND valid_to IS NOT DISTINCT FROM ?"
    replaced = bool(con.execute(f"SELECT 1 FROM price_book WHERE {where}", key).fetchall())  # noqa: S608
    con.execute(f"DELETE FROM price_book WHERE {where}", key)  # noqa: S608 - fixed text, values bound
    con.execute(
        f"INSERT INTO price_book ({BOOK_COLUMNS}, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
        [price.model, price.usd_per_gpu_hour, price.contracted_usd_per_gpu_hour, price.source,
         price.valid_from, price.valid_to, price.committed_share, recorded_at],
    )
    return replaced
