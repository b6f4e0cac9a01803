"""The app reads at a glance: human column names with units, times to the minute, and a time range next to the
run picker that narrows what the pages draw."""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path

import polars as pl
import pytest
from streamlit.testing.v1 import AppTest

from dashboards.streamlit.launch import DB_ENV
from dashboards.streamlit.support import TIME_RANGES, column_config, human_name
from tests.support.report_store import build_store
from tests.support.streamlit_app import fresh_caches  # noqa: F401 (an autouse fixture)

APP = Path(__file__).resolve().parents[1] / "dashboards" / "streamlit" / "app.py"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("store") / "gpulens.duckdb")


def test_columns_get_human_names_and_units_not_snake_case_and_raw_floats() -> None:
    frame = pl.DataFrame({
        "idle_ge_hours": [12345.6789], "idle_cost_usd": [1234.5], "idle_share": [0.25], "avg_free_ge": [0.1428571],
        "last_evidence_ts": [datetime(2026, 11, 1, 0, 0, 0, 123456)], "gpu_uuid": ["GPU-1"], "pods": [1200],
    })
    config = column_config(frame)
    labels = {c: config[c]["label"] for c in frame.columns}
    assert labels == {"idle_ge_hours": "idle GE-hours", "idle_cost_usd": "idle cost (USD)", "idle_share": "idle share",
                      "avg_free_ge": "avg free GE", "last_evidence_ts": "last evidence", "gpu_uuid": "GPU",
                      "pods": "pods"}
    formats = {c: config[c].get("type_config", {}).get("format") for c in frame.columns}
    assert formats["idle_ge_hours"] == "localized" and formats["pods"] == "localized"  # thousands separators
    assert formats["idle_cost_usd"] == "dollar" and formats["idle_share"] == "percent"
    assert formats["avg_free_ge"] == "%.2f"  # never four decimals of GE
    assert formats["last_evidence_ts"] == "YYYY-MM-DD HH:mm"  # never microseconds
    assert human_name("demand_p95") == "demand P95"
    assert column_config(frame, pods="mine")["pods"] == "mine"  # a page's own entry wins


def _app(db: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv(DB_ENV, str(db))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    return at


def test_a_time_range_next_to_the_run_picker_narrows_the_tables_and_charts(
    store: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    at = _app(store, monkeypatch)
    picker = at.sidebar.selectbox(key="time_range")
    assert picker.options == list(TIME_RANGES) == ["whole window", "last 24 h", "last 7 d", "last 14 d", "custom"]
    assert [s.label for s in at.sidebar.selectbox] == ["Analysis run", "Time range"]
    at.switch_page("views/health.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.dataframe[-1].value.shape[0] == 1  # the store's one XID event
    at.sidebar.selectbox(key="time_range").set_value("last 24 h").run()
    assert at.dataframe[-1].value.shape[0] == 1  # six hours of data: all within the last day
    at.sidebar.selectbox(key="time_range").set_value("custom").run()
    at.sidebar.date_input(key="time_custom").set_value((date(2026, 10, 1), date(2026, 10, 2))).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.dataframe[-1].value.shape[0] == 0  # a month before the data: nothing in range
    columns = json.loads(at.dataframe[-1].proto.columns)
    assert columns["ts"]["type_config"]["format"] == "YYYY-MM-DD HH:mm" and columns["gpu_uuid"]["label"] == "GPU"
