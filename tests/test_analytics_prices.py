"""Prices: a --prices file beats the price book (the store's price_book table), which beats the packaged list prices."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from analytics.run import analyze
from gpulens.core.errors import UserError
from tests.support.analytics_fleet import Fleet
from tests.test_analytics_idle_capacity import build, settings


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    build(path)
    return path


def test_the_store_prices_table_overrides_the_defaults(store: Path) -> None:
    f = Fleet(store)
    f.price("NVIDIA H200", 7.0, 5.0)  # NVML product name: normalised to H200
    f.close()
    summary = analyze(store, settings())
    # H200: 2 GPU-hours at the contracted $5.00; A100 keeps its default $1.50.
    assert summary.fleet_cost_usd == Decimal("11.50")
    assert summary.reconciled


def test_a_prices_file_overrides_everything(store: Path, tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  H200: {list_usd_per_gpu_hour: 1.0}\nfallback_usd_per_gpu_hour: 2.0\n")
    f = Fleet(store)
    f.price("H200", 7.0)
    f.close()
    summary = analyze(store, settings(prices_path=prices))
    assert summary.fleet_cost_usd == Decimal("4.00")  # 2 x $1.00 for H200, A100 falls back to $2.00


def test_a_bad_prices_file_is_named_in_one_line(store: Path, tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("models:\n  H200: {list_usd_per_gpu_hour: -3}\n")
    with pytest.raises(UserError, match=r"prices.yaml: models.H200.list_usd_per_gpu_hour"):
        analyze(store, settings(prices_path=prices))
