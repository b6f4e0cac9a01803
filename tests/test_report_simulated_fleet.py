"""The report and the app on a real pipeline: simulator backfill -> analyze -> recommend -> plan -> outputs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from analytics.plan.fleet import plan_store
from analytics.plan.policy import PlanPolicy
from analytics.recommend import recommend
from analytics.run import analyze
from analytics.settings import AnalysisSettings
from collector.backfill import backfill_simulated
from dashboards.report import write_report
from dashboards.report.data import StoreReader
from dashboards.streamlit.launch import DB_ENV, PAGES

pytestmark = pytest.mark.slow

DAY = 86400.0
END = 1_790_000_000.0 - 1_790_000_000.0 % 3600


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "gpulens.duckdb"
    backfill_simulated(path, None, END - DAY, END, 300.0)
    analyze(path, AnalysisSettings(window_seconds=int(DAY), bucket_seconds=3600))
    recommend(path)
    plan_store(path, PlanPolicy())  # stored even where the default reserve leaves a pool in conflict
    return path


def test_every_report_section_has_content_and_no_missing_analysis_notice(store: Path, tmp_path: Path) -> None:
    index = write_report(store, tmp_path / "report")
    page = index.read_text(encoding="utf-8")
    assert 'class="notice"' not in page
    assert page.count("<svg") >= 7  # capacity, idle, 2 cost, 2 risk heat maps, recommendations
    with (tmp_path / "report" / "tenants.csv").open(newline="", encoding="utf-8") as fh:
        tenants = list(csv.DictReader(fh))
    reader = StoreReader.open(store)
    try:
        assert {t["tenant"] for t in tenants} == set(reader.tenant_usage()["tenant"].to_list())
        billed = sum(reader.cost_split()["billed_usd"].to_list())
    finally:
        reader.close()
    assert f"${billed:,.2f}" in page


def test_every_app_page_renders_the_simulated_fleet_without_notices(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st.cache_data.clear()
    st.cache_resource.clear()
    monkeypatch.setenv(DB_ENV, str(store))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "dashboards/streamlit/app.py"), default_timeout=90)
    at.run()
    for path, title, _icon in PAGES:
        at.switch_page(path)
        at.run()
        assert not at.exception, (path, [e.value for e in at.exception])
        assert [t.value for t in at.title][0].startswith(title.split()[0]), path
        assert not at.info and not at.error, (path, [i.value for i in at.info], [e.value for e in at.error])
        assert at.get("vega_lite_chart") or at.dataframe, path
        assert not at.markdown, (path, "stray text: Streamlit magic printed a bare string literal")
    st.cache_data.clear()
    st.cache_resource.clear()
