"""GPU prices per model: a YAML file (or the packaged defaults) overlaid by the store's ``prices`` table."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import duckdb
from pydantic import BaseModel, ConfigDict, Field

from gpulens.core.config import load_yaml_model, parse_yaml_model
from gpulens.core.mig_catalog import short_model


class ModelPrice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    list_usd_per_gpu_hour: float = Field(ge=0)
    contracted_usd_per_gpu_hour: float | None = Field(None, ge=0)


class PriceFile(BaseModel):
    """The prices YAML: ``models: {H200: {list_usd_per_gpu_hour: 3.5}}`` plus a fallback price."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: str = "USD"
    models: dict[str, ModelPrice] = {}
    fallback_usd_per_gpu_hour: float = Field(0.95, ge=0)


@dataclass(frozen=True)
class PriceBook:
    """List and contracted USD per whole-GPU hour, by short model name."""

    list_price: dict[str, float]
    contracted_price: dict[str, float]
    fallback: float
    origin: str

    def list_for(self, model: str | None) -> float:
        return self.list_price.get(model or "", self.fallback)

    def contracted_for(self, model: str | None) -> float:
        return self.contracted_price.get(model or "", self.list_for(model))


def load_price_book(con: duckdb.DuckDBPyConnection, path: Path | None) -> PriceBook:
    """Prices from ``path`` if given; else the store's ``prices`` table over the packaged defaults."""
    if path is not None:
        return _book(load_yaml_model(path, PriceFile), {}, str(path))
    text = resources.files("gpulens.analytics").joinpath("default_prices.yaml").read_text(encoding="utf-8")
    defaults = parse_yaml_model(text, PriceFile, origin="analytics/default_prices.yaml")
    rows = con.execute("SELECT gpu_model, usd_per_gpu_hour, contracted_usd_per_gpu_hour FROM prices").fetchall()
    store = {str(m): ModelPrice(list_usd_per_gpu_hour=lp, contracted_usd_per_gpu_hour=cp) for m, lp, cp in rows}
    origin = "store prices table + packaged defaults" if store else "packaged defaults"
    return _book(defaults, store, origin)


def _book(file: PriceFile, overrides: dict[str, ModelPrice], origin: str) -> PriceBook:
    merged = {short_model(k): v for k, v in file.models.items()}
    merged.update({short_model(k): v for k, v in overrides.items()})
    return PriceBook(
        list_price={k: v.list_usd_per_gpu_hour for k, v in merged.items()},
        contracted_price={
            k: v.contracted_usd_per_gpu_hour for k, v in merged.items() if v.contracted_usd_per_gpu_hour is not None
        },
        fallback=file.fallback_usd_per_gpu_hour,
        origin=origin,
    )
