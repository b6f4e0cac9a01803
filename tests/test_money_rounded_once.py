"""Money is rounded once: the chargeback's cents (largest remainder from the fleet total) are what the CLI
summary, the report's tenants.csv and the FOCUS CSV all print; tenants.csv has the same columns for every tenant.

Three H200s at $1.00/h over one hour; alpha, beta and gamma each hold one, idle, for 20 minutes ($0.3333 each).
The fleet costs $3.00; largest remainder gives one tenant $0.34 and the others $0.33, so rounding each
tenant's own sum ($0.33 for all three) would not add up to the fleet total.
"""

from __future__ import annotations

import csv
import re
from collections import defaultdict
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from tests.support.analytics_fleet import T0, Fleet
from tests.support.cli import gpulens

TENANTS = ("alpha", "beta", "gamma")


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    """The store, what `gpulens analyze` printed, and the folder of its FOCUS export."""
    root = tmp_path_factory.mktemp("money")
    db = root / "s.duckdb"
    f = Fleet(db)
    f.price("H200", 1.0)
    f.node("n1")
    for i, tenant in enumerate(TENANTS):
        f.gpu(f"GPU-{i}", "n1")
        f.samples(f"GPU-{i}", count=60, activity=0.0)
        f.alloc(f"GPU-{i}", tenant, count=20)
    f.close()
    focus = root / "focus"
    proc = gpulens("analyze", "--db", str(db), "--window", "1h", "--bucket", "1h",
                   "--end", (T0 + timedelta(hours=1)).isoformat(), "--out", str(focus))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return db, proc.stdout, focus


def _cli_idle_usd(stdout: str) -> dict[str, Decimal]:
    rows = re.findall(r"^  (\S+)\s+[\d.,]+ GE-h \(.*?\)\s+\$\s*([\d,]+\.\d\d)", stdout, re.MULTILINE)
    return {tenant: Decimal(usd.replace(",", "")) for tenant, usd in rows}


def test_the_cli_prints_each_tenants_idle_money_with_the_cents_of_the_csv_exports(
    analysed: tuple[Path, str, Path], tmp_path: Path
) -> None:
    db, stdout, focus = analysed
    cli = _cli_idle_usd(stdout)
    assert set(cli) == set(TENANTS), stdout
    assert sum(cli.values()) == Decimal("1.00")  # a third of the $3.00 fleet, to the cent: one tenant has $0.34
    focus_idle: dict[str, Decimal] = defaultdict(Decimal)
    with (focus / "chargeback_focus.csv").open() as fh:
        for row in csv.DictReader(fh):
            if row["x_CostState"] == "idle":
                focus_idle[row["x_Tenant"]] += Decimal(row["BilledCost"])
    assert cli == dict(focus_idle)
    report = gpulens("report", "--db", str(db), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    with (tmp_path / "report" / "tenants.csv").open() as fh:
        tenants = {row["tenant"]: Decimal(row["idle_cost_usd"]).quantize(Decimal("0.01")) for row in csv.DictReader(fh)}
    assert cli == tenants


def test_the_cli_cost_of_each_state_adds_up_to_the_reconciled_fleet_total(analysed: tuple[Path, str, Path]) -> None:
    _, stdout, _ = analysed
    states = re.findall(r"^  (allocated-\S+|unallocated|unknown)\s+.*\$\s*([\d,]+\.\d\d)$", stdout, re.MULTILINE)
    assert sum(Decimal(usd.replace(",", "")) for _, usd in states) == Decimal("3.00"), stdout
    assert "chargeback $3.00 vs fleet capacity x price $3.00: reconciled" in stdout


def test_tenants_csv_has_one_header_and_the_same_columns_for_every_tenant_and_scope(
    analysed: tuple[Path, str, Path], tmp_path: Path
) -> None:
    db, _, _ = analysed
    out = tmp_path / "per-tenant"
    proc = gpulens("report", "--db", str(db), "--out", str(out), "--per-tenant")
    assert proc.returncode == 0, proc.stderr
    fleet = gpulens("report", "--db", str(db), "--out", str(tmp_path / "fleet"))
    assert fleet.returncode == 0, fleet.stderr
    headers = {}
    for path in [tmp_path / "fleet" / "tenants.csv", *sorted(out.glob("*/tenants.csv"))]:
        with path.open() as fh:
            rows = list(csv.reader(fh))
        assert all(len(r) == len(rows[0]) for r in rows), path
        headers[path.parent.name] = rows[0]
    assert set(headers) == {"fleet", *TENANTS}
    assert len({tuple(h) for h in headers.values()}) == 1, headers
    assert {"billed_active_usd", "billed_idle_usd", "billed_unmeasured_usd", "billed_total_usd",
            "isolation_risk_score"} <= set(headers["fleet"])
