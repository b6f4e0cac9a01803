"""The Streamlit app under AppTest: every page renders from a real store, without exceptions."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from dashboards.streamlit.launch import DB_ENV, PAGES, db_path_from, streamlit_command
from tests.support.report_store import EVIL_TENANT, build_store
from tests.support.streamlit_app import fresh_caches  # noqa: F401 (an autouse fixture)

APP = Path(__file__).resolve().parents[1] / "dashboards" / "streamlit" / "app.py"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("store") / "gpulens.duckdb")


def _app(db: Path | None, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    if db is None:
        monkeypatch.delenv(DB_ENV, raising=False)
    else:
        monkeypatch.setenv(DB_ENV, str(db))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    return at


def _visit(at: AppTest, page: str) -> AppTest:
    at.switch_page(page)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_fleet_page_shows_fleet_size_and_capacity_states(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(store, monkeypatch)
    assert not at.exception
    assert [t.value for t in at.title] == ["Fleet capacity"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["nodes"] == "2" and metrics["GPUs"] == "3" and metrics["tenants"] == "3"
    assert at.get("vega_lite_chart"), "capacity chart missing"
    assert len(at.dataframe) == 2


def test_the_tenants_page_charts_chargeback_and_idle_and_shows_a_tenant_as_text(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _visit(_app(store, monkeypatch), "views/tenants.py")
    assert len(at.get("vega_lite_chart")) == 2
    usage = at.dataframe[0].value
    assert set(usage["tenant"]) == {"vision", "nlp", EVIL_TENANT}
    at.selectbox(key="tenant").set_value(EVIL_TENANT).run()
    assert not at.exception
    assert f"Tenant: {EVIL_TENANT}" in [t.value for t in at.text]  # plain text, never markdown or HTML


def test_the_risk_page_has_a_heat_map_for_tenants_and_for_gpus(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _visit(_app(store, monkeypatch), "views/risk.py")
    assert at.get("vega_lite_chart")
    assert "reason" in at.dataframe[1].value.columns
    at.radio(key="scope").set_value("device").run()
    assert not at.exception
    assert list(at.dataframe[0].value["subject"]) == ["node-h200/GPU-h200-0", "node-a100/GPU-a100-0"]


def test_the_recommendations_page_shows_evidence_charts_for_a_workload(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _visit(_app(store, monkeypatch), "views/recommendations.py")
    table = at.dataframe[0].value
    assert list(table["change"]) == ["gpu → 3g.40gb", "1g.18gb → 1g.18gb"]
    assert len(at.get("vega_lite_chart")) == 2  # held vs used GE, and memory
    at.selectbox(key="workload").set_value(1).run()
    assert not at.exception
    assert any(EVIL_TENANT in t.value for t in at.text)
    at.radio(key="kind").set_value("quota").run()
    assert not at.exception
    assert list(at.dataframe[0].value["change"]) == ["4 → 3"]


def test_the_health_page_lists_the_gpu_to_drain_and_the_xid(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _visit(_app(store, monkeypatch), "views/health.py")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["GPUs to drain"] == "1"
    drain = at.dataframe[0].value
    assert "GPU-a100-1" in set(drain["gpu_uuid"].dropna())
    assert 79 in set(at.dataframe[-1].value["code"])


def test_every_page_renders_on_a_store_without_analysis_and_says_what_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = build_store(tmp_path / "raw.duckdb", with_results=False)
    at = _app(raw, monkeypatch)
    assert not at.exception
    for path, _title, _icon in PAGES:
        _visit(at, path)
        assert any("run `gpulens" in i.value for i in at.info), path


def test_without_a_store_the_app_says_how_to_start_it(monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(None, monkeypatch)
    assert not at.exception
    assert any("gpulens dashboard --db FILE" in e.value for e in at.error)


def test_a_missing_store_file_is_one_error_line_not_a_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at = _app(tmp_path / "missing.duckdb", monkeypatch)
    assert not at.exception
    assert [e.value for e in at.error] == ["There is no store yet: the platform team has to collect data first."]
    assert not any(str(tmp_path) in e.value for e in at.error)  # the server's paths stay in its log


def test_pages_never_allow_raw_html() -> None:
    for path in APP.parent.rglob("*.py"):
        assert "unsafe_allow_html" not in path.read_text(encoding="utf-8"), path


def test_the_launch_command_passes_the_db_path_as_one_argument(tmp_path: Path) -> None:
    odd = tmp_path / "a b; rm -rf x" / "s.duckdb"
    argv = streamlit_command(odd, port=8600, host="127.0.0.1")
    assert argv[-2:] == ["--db", str(odd.resolve())]
    assert db_path_from(argv[argv.index("--") + 1:], {}) == str(odd.resolve())
    assert db_path_from(["--db=/x.duckdb"], {}) == "/x.duckdb"
    assert db_path_from([], {DB_ENV: "/env.duckdb"}) == "/env.duckdb"


def _gpulens(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpulens.cli", *args], capture_output=True, text=True, timeout=60)


def test_the_dashboard_command_on_a_missing_store_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    proc = _gpulens("dashboard", "--db", str(tmp_path / "nope.duckdb"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulens: error: no store at")


def test_the_dashboard_command_refuses_a_port_out_of_range(store: Path) -> None:
    proc = _gpulens("dashboard", "--db", str(store), "--port", "70000")
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpulens: error:") and "--port" in proc.stderr and "65535" in proc.stderr


def test_the_dashboard_command_help_explains_its_options() -> None:
    proc = _gpulens("dashboard", "--help")
    assert proc.returncode == 0
    for option in ("--db", "--port", "--host", "read-only"):
        assert option in proc.stdout


def test_the_health_page_shows_gpus_on_watch_and_the_lead_before_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = build_store(tmp_path / "early.duckdb")
    with duckdb.connect(str(db)) as con:
        run_id, start, end = con.execute("SELECT run_id, window_start, window_end FROM health LIMIT 1").fetchone()
        trend = json.dumps([{"signal": "trend_pcie_replays_per_hour", "value": 900.0, "threshold": 60.0,
                             "severity": "watch", "reason": "PCIe replays rising since 2026-11-01 02:00"}])
        con.execute(
            "INSERT INTO health (run_id, window_start, window_end, scope, node, gpu_uuid, state, drain_candidate,"
            " evidence, trend_start_ts, warning_ts, failure_ts, lead_seconds) VALUES"
            " (?, ?, ?, 'gpu', 'node-h200', 'GPU-WATCHED', 'watch', true, ?, ?, ?, NULL, NULL),"
            " (?, ?, ?, 'gpu', 'node-a100', 'GPU-FAILED', 'drain', true, ?, ?, ?, ?, 9000)",
            [run_id, start, end, trend, start + timedelta(hours=2), start + timedelta(hours=3),
             run_id, start, end, trend, start, start + timedelta(hours=1), start + timedelta(hours=3.5)],
        )
    at = _visit(_app(db, monkeypatch), "views/health.py")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["GPUs on watch"] == "1"
    early = at.dataframe[1].value
    assert list(early["gpu_uuid"]) == ["GPU-FAILED", "GPU-WATCHED"]
    assert list(early["lead_hours"].round(2).fillna(-1)) == [2.5, -1]
    assert early["trend_start_ts"].notna().all()
