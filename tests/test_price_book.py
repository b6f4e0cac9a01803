"""The one price book: every command that prints or decides money reads it, names each price's source, and
leaves a model without a price unpriced (NULL money), never zero and never a silent packaged default."""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
import yaml

from analytics.miglayout.fleet import InstanceDemand
from analytics.miglayout.planner import LayoutPlan
from analytics.miglayout.run import LayoutRun
from analytics.prices import PACKAGED, Price, record_price, run_price_book
from analytics.run import analyze
from collector.schema import create_schema
from dashboards.grafana.price_rules import PRICE_SERIES, price_rules
from tests.support.analytics_fleet import Fleet
from tests.support.cli import assert_one_line_error, gpulens
from tests.support.prometheus import promtool
from tests.test_analytics_idle_capacity import END, T0, build, settings


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    build(path)  # GPU-A and GPU-B: H200 ($3.50 packaged); GPU-C: A100 MIG ($1.50 packaged)
    return path


def h200_at(tmp_path: Path, usd: float) -> Path:
    prices = tmp_path / "prices.yaml"
    prices.write_text(f"models:\n  H200: {{list_usd_per_gpu_hour: {usd}}}\n")
    return prices


def h200_demand() -> InstanceDemand:
    """One workload that gives back a whole H200 for a 1g instance (6/7 GE freed)."""
    return InstanceDemand("team/Deployment/w", "team", "Deployment", "w", "alpha", "H200", "1g.18gb", 1, "gpu", 1.0)


def test_after_analyze_with_a_prices_file_the_mig_plan_prices_with_that_run_s_book(store: Path, tmp_path: Path) -> None:
    """The MIG plan said '$.. per month at list price, packaged defaults' after `analyze --prices` set H200 at $5."""
    prices = h200_at(tmp_path, 5.0)
    analyze(store, settings(prices_path=prices))
    with duckdb.connect(str(store), read_only=True) as con:
        book = run_price_book(con)
    plan = LayoutPlan(gpus=(), demands=(h200_demand(),), changes=(), reused=(), unplaced=())
    run = LayoutRun(plan, T0, END, book)
    assert run.usd_per_month_freed == pytest.approx(6 / 7 * 5.0 * 730)
    words = run.money_words()
    assert f"prices file {prices}, this run" in words and "$5 per GPU-hour" in words
    assert PACKAGED not in words


def test_a_model_missing_from_the_prices_file_says_its_price_is_the_packaged_list_price(
    store: Path, tmp_path: Path
) -> None:
    """A100 is not in the file: it used to take the packaged price with nothing but the file named as origin."""
    summary = analyze(store, settings(prices_path=h200_at(tmp_path, 5.0)))
    text = summary.render()
    assert "A100: $1.5 per GPU-hour list (list price (packaged))" in text
    assert f"H200: $5 per GPU-hour list (prices file {tmp_path / 'prices.yaml'}, this run)" in text
    assert f"prices from {tmp_path / 'prices.yaml'} are used for this run only (the stored book is unchanged)" in text


def test_a_model_no_price_names_is_unpriced_with_null_money_never_a_default(store: Path) -> None:
    with duckdb.connect(str(store)) as con:  # GPU-B becomes a model neither the book nor the packaged list names
        con.execute("UPDATE devices SET gpu_model = 'L40S' WHERE gpu_uuid = 'GPU-B'")
        con.execute("UPDATE gpus SET gpu_model = 'L40S' WHERE gpu_uuid = 'GPU-B'")
    summary = analyze(store, settings())
    with duckdb.connect(str(store), read_only=True) as con:
        costs = con.execute("SELECT DISTINCT cost_usd IS NULL FROM idle_capacity WHERE gpu_uuid = 'GPU-B'").fetchall()
        lines = con.execute("SELECT count(*) FROM chargeback WHERE x_GpuModel = 'L40S'").fetchone()
    assert costs == [(True,)]  # unmeasured money is NULL, not 0 and not OpenCost's $0.95
    assert lines == (0,)
    assert summary.unpriced_ge_hours == {"L40S": pytest.approx(1.0)}
    text = summary.render()
    assert "L40S: unpriced" in text
    assert re.search(r"allocated-idle +0\.5 GE-h +16\.7% +unpriced$", text, re.MULTILINE)  # beta's L40S: not $0.00
    assert re.search(r"^  beta .*of its allocation\) +unpriced ", text, re.MULTILINE)
    assert summary.fleet_cost_usd == Decimal("3.50") + Decimal("1.50")  # GPU-A and GPU-C only
    assert summary.reconciled


def test_the_per_state_dollars_add_up_to_the_chargeback_total_at_the_price_paid(store: Path) -> None:
    f = Fleet(store)
    f.price("H200", 7.0, 5.0)  # list $7, paid $5
    f.close()
    summary = analyze(store, settings())
    assert sum(summary.cost_usd_by_state.values()) == pytest.approx(float(summary.chargeback_total_usd))
    assert summary.chargeback_total_usd == Decimal("11.50")  # 2 x $5 + $1.50, not the $7 list price
    assert "H200: $7 per GPU-hour list, paid $5 (set by the test)" in summary.render()


def test_a_price_set_in_the_book_overrides_the_packaged_one_and_analyze_names_it(store: Path) -> None:
    proc = gpulens("prices", "set", "--db", str(store), "--model", "NVIDIA H200", "--usd-per-gpu-hour", "6",
                   "--valid-from", "2026-01-01", "--source", "finance 2026 rate card")
    assert proc.returncode == 0, proc.stderr
    shown = gpulens("prices", "show", "--db", str(store), "--at", "2026-01-05")
    assert "H200: $6 per GPU-hour list (finance 2026 rate card, valid 2026-01-01 .. ...)" in shown.stdout
    assert "A100: $1.5 per GPU-hour list (list price (packaged))" in shown.stdout
    summary = analyze(store, settings())
    assert summary.fleet_cost_usd == Decimal("12.00") + Decimal("1.50")


def test_a_price_holds_only_inside_its_validity(store: Path) -> None:
    with duckdb.connect(str(store)) as con:
        record_price(con, Price("H200", 9.0, None, "last year", datetime(2025, 1, 1), datetime(2026, 1, 1)),
                     datetime(2025, 1, 1))
    assert analyze(store, settings()).fleet_cost_usd == Decimal("7.00") + Decimal("1.50")  # packaged $3.50 again


@pytest.mark.parametrize(("args", "fragment"), [
    (("--model", "H200", "--usd-per-gpu-hour", "-1"), "--usd-per-gpu-hour must be a number of US dollars"),
    (("--model", "H200", "--usd-per-gpu-hour", "2", "--valid-from", "soon"), "--valid-from 'soon' is not an ISO"),
    (("--model", "H200", "--usd-per-gpu-hour", "2", "--valid-from", "2026-02-01", "--valid-to", "2026-01-01"),
     "--valid-to 2026-01-01 is not after --valid-from"),
])
def test_a_bad_price_flag_is_one_line_naming_the_flag(store: Path, args: tuple[str, ...], fragment: str) -> None:
    assert_one_line_error(gpulens("prices", "set", "--db", str(store), *args), fragment)


def test_an_older_store_s_prices_table_becomes_the_price_book(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE prices (gpu_model VARCHAR PRIMARY KEY, usd_per_gpu_hour DOUBLE NOT NULL, "
                    "contracted_usd_per_gpu_hour DOUBLE)")
        con.execute("INSERT INTO prices VALUES ('H200', 4.0, 3.0)")
        changes = create_schema(con, str(db))
        rows = con.execute("SELECT gpu_model, usd_per_gpu_hour, contracted_usd_per_gpu_hour, source FROM price_book"
                           ).fetchall()
        legacy = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'prices'").fetchone()
    assert rows == [("H200", 4.0, 3.0, "store prices table")]
    assert legacy == (0,)
    assert any("price book" in c for c in changes)


def test_idle_cost_splits_into_committed_already_paid_and_on_demand(store: Path) -> None:
    with duckdb.connect(str(store)) as con:
        record_price(con, Price("H200", 4.0, 3.0, "FOCUS bill nov.csv", committed_share=0.75), datetime(2026, 1, 1))
    summary = analyze(store, settings())
    with duckdb.connect(str(store), read_only=True) as con:
        idle_h200 = con.execute(
            "SELECT sum(\"BilledCost\"), sum(\"x_CommittedCost\") FROM chargeback "
            "WHERE x_CostState = 'idle' AND x_GpuModel = 'H200'").fetchone()
        a100 = con.execute("SELECT DISTINCT \"x_CommittedCost\" FROM chargeback WHERE x_GpuModel = 'A100'").fetchall()
    assert idle_h200 is not None and idle_h200[1] == (idle_h200[0] * Decimal("0.75")).quantize(Decimal("0.01"))
    assert a100 == [(None,)]  # no commitment data for A100: not known, not zero
    assert summary.idle_committed_usd == idle_h200[1]
    assert "committed, already paid" in summary.render()


def test_prices_rules_are_valid_recording_rules_of_the_price_paid(tmp_path: Path) -> None:
    book_store = tmp_path / "b.duckdb"
    build(book_store)
    with duckdb.connect(str(book_store)) as con:
        record_price(con, Price("H200", 5.0, 4.0, "contract"), datetime(2026, 1, 1))
    out = tmp_path / "prices.rules.yaml"
    proc = gpulens("prices", "rules", "--db", str(book_store), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    code, output = promtool("check", "rules", str(out))
    assert code == 0, output
    rules = yaml.safe_load(out.read_text())["groups"][0]["rules"]
    h200 = [r for r in rules if r["labels"]["gpu_model"] == "H200"]
    assert h200 and {r["expr"] for r in h200} == {"vector(4.0)"} and {r["record"] for r in h200} == {PRICE_SERIES}


def test_an_unpriced_model_gets_no_price_series() -> None:
    from analytics.prices import PriceBook

    rules = price_rules(PriceBook({"H200": Price("H200", 2.0, None, "x")}, "test"), ["L40S", "NVIDIA H200"])
    models = {r["labels"]["model"] for r in rules["groups"][0]["rules"]}  # type: ignore[index]
    assert "NVIDIA H200" in models and "L40S" not in models


def test_plan_unit_prices_come_from_the_book_the_last_analysis_used(store: Path, tmp_path: Path) -> None:
    """`plan` had no price input: its unit prices were the packaged defaults whatever analyze priced with."""
    from analytics.plan.inputs import inventory_capacity

    analyze(store, settings(prices_path=h200_at(tmp_path, 5.0)))
    with duckdb.connect(str(store)) as con:
        con.execute("INSERT INTO resource_flavors (flavor, node_labels) VALUES ('all', '{}')")
        fleet = inventory_capacity(con, ["all"], T0, 730.0)
    assert fleet.pools[("all", "nvidia.com/gpu")].unit_price_month == pytest.approx(5.0 * 730)


def test_plan_says_a_flavor_with_an_unpriced_model_has_no_unit_price(store: Path) -> None:
    from analytics.plan.inputs import inventory_capacity

    with duckdb.connect(str(store)) as con:
        con.execute("UPDATE devices SET gpu_model = 'L40S' WHERE gpu_uuid = 'GPU-B'")
        con.execute("INSERT INTO resource_flavors (flavor, node_labels) VALUES ('all', '{}')")
        fleet = inventory_capacity(con, ["all"], T0, 730.0)
    assert fleet.pools[("all", "nvidia.com/gpu")].unit_price_month is None  # not a guess, not zero
    assert any("unpriced (L40S" in n for n in fleet.notes)


def test_the_report_header_names_each_model_s_price_source_and_the_unpriced_ones(store: Path) -> None:
    from analytics.run_parameters import describe_run

    with duckdb.connect(str(store)) as con:
        con.execute("UPDATE devices SET gpu_model = 'L40S' WHERE gpu_uuid = 'GPU-B'")
    analyze(store, settings())
    with duckdb.connect(str(store), read_only=True) as con:
        row = con.execute("SELECT run_id, window_start, window_end, bucket_seconds, parameters FROM analysis_runs"
                          ).fetchone()
    assert row is not None
    run = describe_run(*row)
    assert "H200: $3.5 per GPU-hour list (list price (packaged))" in run.header()
    assert "L40S: unpriced" in run.header()
    assert not [n for n in run.non_defaults if "price" in n]  # the book is not a parameter with a default


def test_the_dashboard_s_cost_rate_is_each_model_s_ge_times_its_price_in_real_promtool(tmp_path: Path) -> None:
    """team-a holds a whole H200 ($3 paid) and a 3g.40gb on an A100 ($2): $3 + 3/7 x $2 per hour; an L40S
    without a price adds nothing (no price series), and team-z, on the L40S only, has no cost at all."""
    from analytics.prices import PriceBook
    from dashboards.grafana.chargeback import ALLOCATED_BY_MODEL, priced

    book = PriceBook({"H200": Price("H200", 4.0, 3.0, "contract"), "A100": Price("A100", 2.0, None, "card")}, "t")
    rules = tmp_path / "prices.yaml"
    rules.write_text(yaml.safe_dump(price_rules(book, ["H200", "A100", "L40S"])))
    gpus = [("n1", "GPU-1", "H200"), ("n2", "GPU-3", "A100"), ("n3", "GPU-9", "L40S")]
    held = [("n1", "GPU-1", "gpu", 1.0, "team-a"), ("n2", "GPU-3", "3g.40gb", 3 / 7, "team-a"),
            ("n3", "GPU-9", "gpu", 1.0, "team-z")]
    series = [{"series": f'gpulens_gpu_info{{node="{n}",gpu="{g}",model="{m}"}}', "values": "1x10"} for n, g, m in gpus]
    series += [{"series": f'gpulens_allocation_gpu_equivalents{{node="{n}",gpu="{g}",device="{g}",profile="{p}",'
                          f'tenant="{t}"}}', "values": f"{ge}x10"} for n, g, p, ge, t in held]
    rate = priced(f'{ALLOCATED_BY_MODEL}{{tenant=~".*"}}', "tenant")
    test = tmp_path / "test.yaml"
    test.write_text(yaml.safe_dump({
        "rule_files": [str(Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "gpulens-rules.yaml"),
                       str(rules)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": [
            {"expr": rate, "eval_time": "5m", "exp_samples": [{"labels": '{tenant="team-a"}', "value": 3 + 3 / 7 * 2}]},
        ]}],
    }))
    code, output = promtool("test", "rules", str(test))
    assert code == 0, output


def test_the_report_shows_no_money_for_a_tenant_held_only_on_an_unpriced_model(store: Path) -> None:
    from dashboards.report.data import StoreReader

    with duckdb.connect(str(store)) as con:  # beta holds GPU-B only
        con.execute("UPDATE devices SET gpu_model = 'L40S' WHERE gpu_uuid = 'GPU-B'")
    analyze(store, settings())
    reader = StoreReader.open(store)
    try:
        usage = {r["tenant"]: r for r in reader.tenant_usage().to_dicts()}
    finally:
        reader.close()
    assert usage["beta"]["held_cost_usd"] is None and usage["beta"]["idle_cost_usd"] is None  # not $0.00
    assert usage["alpha"]["held_cost_usd"] == pytest.approx(1.75)  # GPU-A held 30 min at $3.50
