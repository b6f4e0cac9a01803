"""The report's chargeback index: per tenant its charge, its share of the fleet cost, its energy and CO2e,
the money no tenant is charged on its own rows with its share, and the totals."""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from analytics.tenant_energy import DEFAULT_GRID_GCO2_PER_KWH
from dashboards.report.data import StoreReader
from gpulens.cli import app
from tests.support.report_store import EVIL_TENANT, SAMPLES, STEP, build_store

WATTS = 300.0  # every GPU of the fixture store draws 300 W by its energy counter
HOURS = (SAMPLES - 1) * STEP.total_seconds() / 3600  # the first sample has no reading before it


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("store") / "gpulens.duckdb")


def _index(store: Path, grid: float = DEFAULT_GRID_GCO2_PER_KWH) -> dict[str, dict[str, object]]:
    reader = StoreReader.open(store)
    try:
        frame = reader.chargeback_index(grid)
    finally:
        reader.close()
    return {str(r["account"]): r for r in frame.iter_rows(named=True)}


def _section(page: str) -> str:
    match = re.search(r'<section id="chargeback">(.*?)</section>', page, re.S)
    assert match, "no chargeback section"
    return match.group(1)


def test_each_tenants_charge_and_share_add_up_to_the_fleet_cost_with_the_unallocated_account(store: Path) -> None:
    index = _index(store)
    with duckdb.connect(str(store), read_only=True) as con:
        row = con.execute("SELECT sum(BilledCost), sum(BilledCost) FILTER (WHERE SubAccountName = '__unallocated__') "
                          "FROM chargeback").fetchone()
    assert row is not None
    total, unallocated = float(row[0]), float(row[1])
    assert "__unallocated__" in index and unallocated > 0
    assert sum(float(r["billed_usd"]) for r in index.values()) == pytest.approx(total, abs=0.005)  # type: ignore[arg-type]
    assert sum(float(r["share"]) for r in index.values()) == pytest.approx(1.0)  # type: ignore[arg-type]
    assert index["__unallocated__"]["share"] == pytest.approx(unallocated / total)
    accounts = list(index)
    assert accounts.index("__unallocated__") > max(accounts.index(t) for t in ("vision", "nlp", EVIL_TENANT))


def test_tenant_energy_comes_from_the_counter_shared_by_held_ge(store: Path) -> None:
    index = _index(store, grid=100.0)
    vision = WATTS * (3 / 7 + 1.0) * HOURS / 1000  # its 3g.71gb of the H200 and a whole A100
    assert index["vision"]["energy_kwh"] == pytest.approx(vision)
    assert index["vision"]["co2e_kg"] == pytest.approx(vision * 100.0 / 1000)
    assert index["nlp"]["energy_kwh"] == pytest.approx(WATTS * (1 / 7) * HOURS / 1000)
    # The free A100 and the H200's unheld slices: the fleet's, charged to no tenant.
    assert index["__unallocated__"]["energy_kwh"] == pytest.approx(WATTS * (1.0 + 2 / 7) * HOURS / 1000)


def test_the_report_shows_the_index_with_totals_and_the_share_no_tenant_is_charged(
    store: Path, tmp_path: Path,
) -> None:
    result = CliRunner().invoke(app, ["report", "--db", str(store), "--out", str(tmp_path),
                                      "--grid-gco2-per-kwh", "250"])
    assert result.exit_code == 0, result.output
    section = _section((tmp_path / "index.html").read_text(encoding="utf-8"))
    index = _index(store)
    total = sum(float(r["billed_usd"]) for r in index.values())  # type: ignore[arg-type]
    nobody = float(index["__unallocated__"]["billed_usd"]) + float(  # type: ignore[arg-type]
        index.get("__unknown__", {"billed_usd": 0.0})["billed_usd"])  # type: ignore[arg-type]
    assert f"Charged to no tenant (unallocated capacity and time without data): ${nobody:,.2f} = " \
           f"{nobody / total:.0%} of the fleet cost ${total:,.2f}." in html.unescape(section)
    assert ">total<" in section
    assert "250 gCO2e/kWh" in section
    assert html.escape(EVIL_TENANT, quote=True) in section and EVIL_TENANT not in section


def test_the_grid_intensity_flag_states_its_default_and_refuses_a_negative_value(store: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    help_text = runner.invoke(app, ["report", "--help"], terminal_width=200).output
    assert f"default: {DEFAULT_GRID_GCO2_PER_KWH:g}" in " ".join(help_text.split())
    bad = subprocess.run([sys.executable, "-m", "gpulens.cli", "report", "--db", str(store), "--out", str(tmp_path),
                          "--grid-gco2-per-kwh", "-5"], capture_output=True, text=True, timeout=120, check=False)
    assert (bad.returncode, bad.stderr.strip()) == (2, "gpulens: error: --grid-gco2-per-kwh: must be at least 0 (got -5)")
