"""A FOCUS 1.2/1.3 bill prices each GPU model at its effective cost per GPU-hour, commitment discounts included.

The fixture is hand-made in the shape of an AWS FOCUS 1.2 export: p5.48xlarge on demand (10 h at $98.32) and
under a Savings Plan (30 h, $1,800 effective), the plan's unused commitment ($120), p4d.24xlarge named only in
SkuPriceDetails (5 h at $32.77), an EBS volume, a neocloud's box named by a Tags instance-type label, and tax.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from analytics.focus_prices import (
    BilledModel,
    FocusPrices,
    instance_table,
    parse_mapping,
    read_focus_prices,
)
from gpulens.core.errors import UserError
from tests.support.cli import assert_one_line_error, gpulens

BILL = Path(__file__).parent / "fixtures" / "focus" / "aws_focus_1_2_gpu_bill.csv"


def read(path: Path, *mappings: str) -> FocusPrices:
    return read_focus_prices(path, instance_table(dict(parse_mapping(m) for m in mappings)))


def by_model(path: Path, *mappings: str) -> dict[str, BilledModel]:
    return {m.model: m for m in read(path, *mappings).models}


def test_effective_cost_per_gpu_hour_includes_the_savings_plan_and_list_cost_does_not() -> None:
    h100 = by_model(BILL)["H100"]
    assert h100.gpu_hours == 8 * (10 + 30)
    assert h100.effective_per_gpu_hour == pytest.approx((983.20 + 1800.0) / 320)
    assert h100.list_per_gpu_hour == pytest.approx(98.32 / 8)
    assert h100.committed_share == pytest.approx(30 / 40)


def test_the_instance_type_is_read_from_sku_price_details_too() -> None:
    a100 = by_model(BILL)["A100"]
    assert a100.gpu_hours == 8 * 5 and a100.effective_per_gpu_hour == pytest.approx(32.77 / 8)


def test_unused_commitment_and_non_gpu_usage_are_reported_not_priced_in() -> None:
    bill = read(BILL)
    assert bill.unused_commitment_usd == pytest.approx(120.0)
    assert bill.unmapped_usd == {"gpu-h200-8": 96.0, "(no instance type)": 12.5}
    assert "H200" not in by_model(BILL)


def test_an_instance_type_mapping_from_the_flag_prices_the_neocloud_box() -> None:
    h200 = by_model(BILL, "gpu-h200-8=8xH200")["H200"]
    assert h200.effective_per_gpu_hour == pytest.approx(96 / 32)


def test_the_same_bill_as_parquet_with_typed_columns_gives_the_same_prices(tmp_path: Path) -> None:
    parquet = tmp_path / "bill.parquet"
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        con.read_csv(str(BILL), header=True).create_view("b")  # typed: timestamps with zone, doubles
        con.execute(f"COPY b TO '{parquet}' (FORMAT parquet)")
    csv_prices = {m.model: m.effective_per_gpu_hour for m in read_focus_prices(BILL, instance_table()).models}
    pq_prices = {m.model: m.effective_per_gpu_hour for m in read_focus_prices(parquet, instance_table()).models}
    assert pq_prices == pytest.approx(csv_prices)


def test_a_bill_without_focus_columns_is_refused_naming_them(tmp_path: Path) -> None:
    bad = tmp_path / "bill.csv"
    bad.write_text("Date,Cost\n2026-11-01,3\n")
    with pytest.raises(UserError, match="lacks the column.*ChargeCategory.*FOCUS 1.2/1.3"):
        read_focus_prices(bad, instance_table())


def test_a_malformed_instance_type_flag_is_one_line(tmp_path: Path) -> None:
    proc = gpulens("prices", "import-focus", str(BILL), "--db", str(tmp_path / "s.duckdb"), "--instance-type", "p5=H100")
    assert_one_line_error(proc, "--instance-type 'p5=H100' is not like p5.48xlarge=8xH100")


def test_import_focus_writes_the_bill_s_prices_into_the_book_with_their_source(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    proc = gpulens("prices", "import-focus", str(BILL), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "unused commitment $120.00" in proc.stdout
    shown = gpulens("prices", "show", "--db", str(db), "--at", "2026-11-15")
    assert "H100: $12.29 per GPU-hour list, paid $8.6975 (FOCUS bill aws_focus_1_2_gpu_bill.csv" in shown.stdout
    assert "75% committed" in shown.stdout
