"""The report and the dashboard show one analysis run, say which, and give one set of numbers.

Stores here are analysed by the real ``analyze``: two H200 nodes over two days (the window crosses a
UTC midnight, so the chargeback has two days to round), three tenants, contracted prices below list
prices, a pending MIG request that no free whole GPU fits.
"""

from __future__ import annotations

import csv
import html
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from dashboards.report import write_report
from dashboards.report.data import StoreReader
from dashboards.streamlit.launch import DB_ENV
from gpulens.cli import app
from tests.support.analytics_fleet import T0, Fleet
from tests.support.report_store import build_recommendations

START = T0 + timedelta(hours=20)  # 20:00 .. 04:00 next day: two charge days
HOURS = 8
END = START + timedelta(hours=HOURS)
APP = Path(__file__).resolve().parents[1] / "dashboards" / "streamlit" / "app.py"


def _fleet(path: Path, *, stranded: bool) -> None:
    f = Fleet(path)
    f.node("n0")
    f.node("n1")
    f.gpu("GPU-0", "n0")
    f.gpu("GPU-1", "n0")
    f.gpu("GPU-2", "n1")
    minutes = HOURS * 60
    f.samples("GPU-0", start=START, count=minutes, activity=lambda i: 0.9 if i % 7 == 0 else 0.01)
    f.alloc("GPU-0", "chat", start=START, count=minutes, pod="chat-0")
    f.samples("GPU-1", start=START, count=minutes, activity=lambda i: 0.6 if i % 3 else 0.0)
    f.alloc("GPU-1", "embed", start=START, count=minutes // 2, pod="embed-0")
    f.alloc("GPU-1", "batch", start=START + timedelta(minutes=minutes // 2), count=minutes // 3, pod="batch-0")
    f.samples("GPU-2", start=START, count=minutes, activity=0.0)
    if stranded:
        # a 1g.18gb request pends for the first three hours; a free whole GPU cannot take it
        for m in range(0, 180, 5):
            f.pending("batch", "1g.18gb", START + timedelta(minutes=m), gpu_model="H200")
    else:
        f.alloc("GPU-2", "batch", start=START, count=minutes, pod="batch-1")
        for m in range(0, minutes, 5):  # Kueue metrics were scraped and nothing waited: "nothing stranded" is measured
            f.con.execute(
                "INSERT INTO quota_snapshots (ts, object_kind, object_name, resource, nominal_quota, usage, source) "
                "VALUES (?, 'ClusterQueue', 'batch', 'nvidia.com/gpu', 4, 1, 'test')", [START + timedelta(minutes=m)])
    f.price("H200", 4.1, 3.33)
    f.close()


def _settings(**kw: object) -> AnalysisSettings:
    return AnalysisSettings.model_validate({"window_seconds": f"{HOURS}h", "end": END, **kw})


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Analysed twice: first with the defaults, then (the newest run) with an exploratory threshold."""
    path = tmp_path_factory.mktemp("store") / "gpulens.duckdb"
    _fleet(path, stranded=True)
    analyze(path, _settings())
    analyze(path, _settings(activity_threshold=0.0001))
    return path


def _runs(path: Path) -> dict[float, str]:
    with duckdb.connect(str(path), read_only=True) as con:
        rows = con.execute(
            "SELECT run_id, CAST(json_extract(parameters, '$.activity_threshold') AS DOUBLE) FROM analysis_runs"
        ).fetchall()
    return {threshold: run_id for run_id, threshold in rows}


def _text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


# -- 3. outputs say which run they show -----------------------------------------------------------------


def test_the_report_header_names_the_run_window_bucket_threshold_and_price_source(store: Path, tmp_path: Path) -> None:
    text = _text(write_report(store, tmp_path / "newest").read_text(encoding="utf-8"))
    newest = _runs(store)[0.0001]
    assert (
        f"Run {newest}: window 2026-01-05 20:00 to 2026-01-06 04:00 UTC, 1 h buckets, activity threshold 0.0001, "
        "prices: price book (H200: $4.1 per GPU-hour list, paid $3.33 (set by the test))."
    ) in text
    assert "This run's parameters are not the defaults: activity threshold 0.0001 (default 0.05); window 8 h" in text


def test_report_run_id_picks_an_older_run_whose_note_names_only_what_differs(store: Path, tmp_path: Path) -> None:
    default_run = _runs(store)[0.05]
    result = CliRunner().invoke(app, ["report", "--db", str(store), "--out", str(tmp_path / "r"), "--run-id", default_run])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert f"Run {default_run}: window" in _text(page)
    assert "activity threshold 0.05," in _text(page)
    assert "This run's parameters are not the defaults: window 8 h (default 14 d)." in _text(page)
    with open(tmp_path / "r" / "chargeback_focus.csv", newline="") as fh:
        assert {row["x_RunId"] for row in csv.DictReader(fh)} == {default_run}


def test_an_unknown_run_id_is_one_line_naming_the_runs(store: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "gpulens.cli", "report", "--db", str(store), "--out", str(tmp_path), "--run-id", "nope"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulens: error: --run-id nope: no such analysis run")
    assert all(run_id in lines[0] for run_id in _runs(store).values())


def test_an_analysis_with_nothing_stranded_says_so_instead_of_asking_for_an_analysis(tmp_path: Path) -> None:
    path = tmp_path / "busy.duckdb"
    _fleet(path, stranded=False)  # every GPU held: no free capacity, no fragmentation rows
    analyze(path, _settings())
    text = _text(write_report(path, tmp_path / "out").read_text(encoding="utf-8"))
    assert "Nothing stranded in this window" in text
    assert "no 'fragmentation' results yet" not in text


def test_the_dashboard_heads_each_page_with_the_run_and_warns_on_non_defaults(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st.cache_data.clear()
    st.cache_resource.clear()
    monkeypatch.setenv(DB_ENV, str(store))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception
    runs = _runs(store)
    captions = " ".join(c.value for c in at.caption)
    assert f"Run {runs[0.0001]}: window" in captions and "activity threshold 0.0001" in captions
    assert "activity threshold 0.0001 (default 0.05)" in " ".join(w.value for w in at.warning)
    assert "Idle is decided per sample, not per bucket mean" in captions
    at.selectbox(key="run").set_value(runs[0.05]).run()
    assert not at.exception
    assert f"Run {runs[0.05]}: window" in " ".join(c.value for c in at.caption)
    assert "activity threshold" not in " ".join(w.value for w in at.warning)
    st.cache_data.clear()
    st.cache_resource.clear()


# -- 4. one report, one set of numbers ------------------------------------------------------------------


def test_the_stranded_why_is_the_reason_holding_most_stranded_ge_hours(store: Path) -> None:
    reader = StoreReader.open(store)
    try:
        frag = reader.fragmentation_by_node()
    finally:
        reader.close()
    row = next(r for r in frag.iter_rows(named=True) if r["node"] == "n1")
    assert row["stranded_ge_hours"] == pytest.approx(3.0)  # GPU-2 free for the 3 h the MIG request pended
    # the last buckets (no demand pending) say "idle, not stranded": not what holds the stranded GE-hours
    assert row["why"] == "free capacity that no pending shape fits, while demand was pending"
    assert row["why_share"] == pytest.approx(1.0)


def test_recommendation_rows_of_one_queue_and_resource_tell_their_flavors_apart(store: Path, tmp_path: Path) -> None:
    path = tmp_path / "recs.duckdb"
    path.write_bytes(store.read_bytes())
    with duckdb.connect(str(path)) as con:
        build_recommendations(con)
        con.execute(
            "INSERT INTO recommendations SELECT * REPLACE ('h200-spot' AS flavor, 2 AS current_value) "
            "FROM recommendations WHERE scope = 'quota'"
        )
    page = write_report(path, tmp_path / "out").read_text(encoding="utf-8")
    rows = [r for r in re.findall(r"<tr>(.*?)</tr>", page) if "nlp-cq" in r]
    assert len(rows) == 2
    assert any("h200-mig" in r for r in rows) and any("h200-spot" in r for r in rows)
    assert "Kueue flavor" in page


def _cents(value: str) -> Decimal:
    return Decimal(value.replace("$", "").replace(",", ""))


@pytest.mark.parametrize("policy", ["own-line", "proportional"])
def test_every_money_figure_reconciles_to_the_fleet_total_to_the_cent(tmp_path: Path, policy: str) -> None:
    path = tmp_path / "money.duckdb"
    _fleet(path, stranded=True)
    summary = analyze(path, _settings(unallocated=policy))
    out = tmp_path / "out"
    page = write_report(path, out).read_text(encoding="utf-8")
    fleet = summary.fleet_cost_usd.quantize(Decimal("0.01"))
    with open(out / "chargeback_focus.csv", newline="") as fh:
        focus = list(csv.DictReader(fh))
    assert sum(Decimal(r["BilledCost"]) for r in focus) == fleet
    with open(out / "tenants.csv", newline="") as fh:
        tenants = {r["tenant"]: r for r in csv.DictReader(fh)}
    for tenant, row in tenants.items():
        lines = [r for r in focus if r["x_Tenant"] == tenant]
        idle = sum((Decimal(r["BilledCost"]) for r in lines if r["x_CostState"] == "idle"), Decimal(0))
        held = sum(
            (Decimal(r["BilledCost"]) for r in lines if r["x_CostState"] in ("active", "idle", "unmeasured")), Decimal(0)
        )
        assert Decimal(row["idle_cost_usd"]).quantize(Decimal("0.01")) == idle, tenant
        assert Decimal(row["held_cost_usd"]).quantize(Decimal("0.01")) == held, tenant
        assert Decimal(row["billed_idle_usd"]).quantize(Decimal("0.01")) == idle, tenant
    held_total = sum((Decimal(r["held_cost_usd"]).quantize(Decimal("0.01")) for r in tenants.values()), Decimal(0))
    rest = sum(
        (Decimal(r["BilledCost"]) for r in focus if r["x_CostState"] in ("unallocated", "shared-unallocated", "unknown")),
        Decimal(0),
    )
    assert held_total + rest == fleet
    # the page says the same: the idle-by-tenant table adds up, in words, to the fleet total
    line = re.search(r"held by tenants (\$[\d,.]+)(.*?) = fleet total (\$[\d,.]+)", _text(page))
    assert line is not None
    assert _cents(line.group(1)) == held_total and _cents(line.group(3)) == fleet
    cards = dict(re.findall(r'<div class="value">([^<]*)</div><div class="label">([^<]*)</div>', page))
    assert _cents(next(v for v, k in cards.items() if k == "fleet GPU cost (FOCUS BilledCost)")) == fleet
    idle_table = re.search(r'<section id="idle">.*?</section>', page, re.S)
    assert idle_table is not None
    for tenant, row in tenants.items():
        cells = re.search(rf"<td class=\"txt\">{tenant}</td>(.*?)</tr>", idle_table.group(0))
        assert cells is not None
        money = re.findall(r"\$[\d,.]+", cells.group(1))
        assert [_cents(m) for m in money] == [
            Decimal(row["idle_cost_usd"]).quantize(Decimal("0.01")),
            Decimal(row["held_cost_usd"]).quantize(Decimal("0.01")),
        ]


def test_ge_hours_are_called_ge_hours_and_each_percentage_says_of_what(store: Path, tmp_path: Path) -> None:
    page = write_report(store, tmp_path / "out").read_text(encoding="utf-8")
    assert "GPU-hours held per tenant" not in page and "idle GPU-hours" not in page
    assert "GE-hours held per tenant" in page and "idle GE-hours" in page
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", page) + re.findall(r'<div class="label">([^<]*)</div>', page)
    shares = [h for h in headers if "share" in h]
    assert shares and all(" of " in h for h in shares), shares
