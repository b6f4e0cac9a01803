"""The HTML report: self-contained, with charts, escaped tenant text, FOCUS and per-tenant files."""

from __future__ import annotations

import csv
import html
import re
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from dashboards.report import write_report
from gpulens.cli import app
from gpulens.core.errors import UserError
from tests.support.report_store import EVIL_TENANT, WINDOW, build_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("store") / "gpulens.duckdb")


@pytest.fixture(scope="module")
def report_dir(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    write_report(store, out)
    return out


def test_the_report_opens_with_inline_svg_charts_for_every_section(report_dir: Path) -> None:
    page = (report_dir / "index.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    for anchor in ("summary", "capacity", "idle", "cost", "risk", "health", "files"):
        assert f'<section id="{anchor}">' in page
    assert page.count("<svg") >= 5
    for chart in ("Fleet capacity by state", "GE-hours held per tenant", "Fleet cost by state", "Isolation-risk points"):
        assert chart in page


def test_the_report_is_self_contained_and_runs_no_script(report_dir: Path) -> None:
    page = (report_dir / "index.html").read_text(encoding="utf-8")
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)=["']https?://""", page)
    assert "default-src 'none'" in page


def test_a_hostile_tenant_name_comes_out_escaped_everywhere(report_dir: Path) -> None:
    page = (report_dir / "index.html").read_text(encoding="utf-8")
    assert EVIL_TENANT not in page
    assert html.escape(EVIL_TENANT, quote=True) in page
    assert "<script>alert(1)" not in page


def test_the_cost_split_reconciles_with_the_chargeback_table(store: Path, report_dir: Path) -> None:
    with duckdb.connect(str(store), read_only=True) as con:
        row = con.execute("SELECT sum(BilledCost) FROM chargeback").fetchone()
    assert row is not None
    page = (report_dir / "index.html").read_text(encoding="utf-8")
    assert f"${float(row[0]):,.2f}" in page


def test_the_focus_csv_has_the_focus_columns_and_one_row_per_chargeback_line(store: Path, report_dir: Path) -> None:
    with (report_dir / "chargeback_focus.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    mandatory = {
        "BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "PricingQuantity", "PricingUnit",
        "BillingAccountId", "BillingCurrency", "BillingPeriodStart", "BillingPeriodEnd", "ChargePeriodStart",
        "ChargePeriodEnd", "ChargeCategory", "ChargeDescription", "InvoiceIssuerName", "ProviderName",
        "PublisherName", "ServiceCategory", "ServiceName", "SubAccountId", "ResourceId", "Tags",
    }
    assert mandatory <= set(rows[0])
    with duckdb.connect(str(store), read_only=True) as con:
        count = con.execute("SELECT count(*) FROM chargeback").fetchone()
    assert count is not None and len(rows) == count[0]
    assert datetime.fromisoformat(rows[0]["ChargePeriodStart"].rstrip("Z")) == WINDOW[0]
    assert EVIL_TENANT in {r["SubAccountId"] for r in rows}  # data files keep the name as data
    parquet = pl.read_parquet(report_dir / "chargeback_focus.parquet")
    assert parquet.height == len(rows) and mandatory <= set(parquet.columns)


def test_the_tenant_csv_has_one_row_per_tenant_with_idle_hours_and_cost(report_dir: Path) -> None:
    frame = pl.read_csv(report_dir / "tenants.csv")
    assert sorted(frame["tenant"].to_list()) == sorted(["vision", "nlp", EVIL_TENANT])
    nlp = frame.filter(pl.col("tenant") == "nlp").row(0, named=True)
    assert nlp["idle_ge_hours"] == pytest.approx(6 / 7, rel=1e-6)  # one 1g slice idle for six hours
    assert nlp["idle_share"] == pytest.approx(1.0)
    vision = frame.filter(pl.col("tenant") == "vision").row(0, named=True)
    assert vision["idle_ge_hours"] == pytest.approx(0.0)
    assert vision["billed_total_usd"] > 0 and vision["isolation_risk_score"] == pytest.approx(30.0)


def test_a_store_without_analysis_gives_a_report_that_says_which_command_to_run(tmp_path: Path) -> None:
    store = build_store(tmp_path / "raw.duckdb", with_results=False)
    index = write_report(store, tmp_path / "out")
    page = index.read_text(encoding="utf-8")
    assert "run `gpulens analyze --db" in page
    assert "run `gpulens recommend --db" in page
    assert not (tmp_path / "out" / "chargeback_focus.csv").exists()


def test_a_missing_store_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no store at"):
        write_report(tmp_path / "nope.duckdb", tmp_path / "out")


def test_an_out_path_that_is_a_file_is_refused(store: Path, tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("keep me", encoding="utf-8")
    with pytest.raises(UserError, match="not a directory"):
        write_report(store, target)
    assert target.read_text(encoding="utf-8") == "keep me"


def test_the_report_command_writes_the_report_and_says_where(store: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", "--db", str(store), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "index.html" in result.output
    assert (tmp_path / "r" / "index.html").is_file()


def test_the_report_command_help_explains_its_options() -> None:
    result = CliRunner().invoke(app, ["report", "--help"])
    assert result.exit_code == 0
    assert "--db" in result.output and "--out" in result.output and "FOCUS" in result.output


def test_the_report_command_on_a_missing_store_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "gpulens.cli", "report", "--db", str(tmp_path / "nope.duckdb"), "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"gpulens: error: no store at {tmp_path / 'nope.duckdb'}: "
                                                f"run `gpulens demo` or `gpulens collect --db {tmp_path / 'nope.duckdb'}` first"]


def test_a_store_analysed_but_without_recommendations_keeps_every_other_section(tmp_path: Path) -> None:
    store = build_store(tmp_path / "no-recs.duckdb")
    with duckdb.connect(str(store)) as con:
        con.execute("DROP TABLE recommendations")
    page = write_report(store, tmp_path / "out").read_text(encoding="utf-8")
    assert page.count('class="notice"') == 1
    assert "run `gpulens recommend --db" in page
    assert page.count("<svg") >= 5
    assert (tmp_path / "out" / "chargeback_focus.csv").is_file()
