"""The report's health timeline: per unhealthy node, signals, state changes and the planned taint, in time order."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from dashboards.report.data import StoreReader
from dashboards.report.health_timeline import NodeTimeline, node_timelines
from dashboards.report.writer import write_report
from tests.support.failing_fleet import DEGRADING, FAILED, LOOKALIKE, FailingStore
from tests.support.report_store import build_store


@pytest.fixture(scope="module")
def store(failing_store: FailingStore) -> Path:
    """The session's analyzed fault fleet (read-only)."""
    return failing_store.path


@pytest.fixture(scope="module")
def timelines(store: Path) -> dict[str, NodeTimeline]:
    reader = StoreReader.open(store)
    try:
        return {t.node: t for t in node_timelines(reader)}
    finally:
        reader.close()


def test_the_failed_node_shows_trend_start_raise_watch_failure_and_drain_in_order(
    timelines: dict[str, NodeTimeline],
) -> None:
    t = timelines[FAILED[0]]
    assert t.state == "drain" and t.lead_seconds is not None and t.lead_seconds >= 3600
    texts = [e.text for e in t.events]
    began = next(i for i, x in enumerate(texts) if x == "correctable ECC errors began rising")
    raised = next(i for i, x in enumerate(texts) if x.startswith("trend raised: correctable ECC errors rising since"))
    watch = texts.index("ok -> watch (early-warning trend)")
    failure = next(i for i, x in enumerate(texts) if x.startswith("hard failure, ") and "after the first warning" in x)
    drain = next(i for i, x in enumerate(texts) if x.endswith("-> drain (XID 48 (drain))"))
    assert began < raised <= watch < failure <= drain
    times = [e.ts for e in t.events if e.ts is not None]
    assert times == sorted(times)
    assert t.events[-1].kind == "taint" and "gpulens.io/gpu-unhealthy=" in t.events[-1].text


def test_the_degrading_node_is_on_watch_with_its_taint_planned_and_the_look_alike_is_absent(
    timelines: dict[str, NodeTimeline],
) -> None:
    t = timelines[DEGRADING[0]]
    assert t.state == "watch" and t.lead_seconds is None
    assert [e.text for e in t.events if e.kind == "state"] == ["ok -> watch (early-warning trend)"]
    assert "taint planned: gpulens.io/gpu-unhealthy=trend-pcie-replays-per-hour:NoSchedule" in t.events[-1].text
    assert LOOKALIKE[0] not in timelines


def test_the_report_has_the_timeline_section_with_the_lead(store: Path, tmp_path: Path) -> None:
    html = write_report(store, tmp_path / "report").read_text(encoding="utf-8")
    assert '<section id="health-timeline"><h2>Health timeline</h2>' in html
    assert f"<h3>{FAILED[0]}: drain, warned " in html and "h before it failed</h3>" in html
    assert "began rising" in html


def test_node_names_and_reasons_from_the_store_are_escaped(tmp_path: Path) -> None:
    db = build_store(tmp_path / "evil.duckdb")
    evil = '<img src=x onerror="alert(1)">'
    with duckdb.connect(str(db)) as con:
        run_id, start, end = con.execute("SELECT run_id, window_start, window_end FROM health LIMIT 1").fetchone()
        ev = json.dumps([{"signal": "xid_79", "severity": "drain", "reason": f"XID 79 on {evil}", "gpu_uuid": "G"}])
        con.execute(
            "INSERT INTO health (run_id, window_start, window_end, scope, node, gpu_uuid, state, drain_candidate,"
            " evidence) VALUES (?, ?, ?, 'node', ?, NULL, 'drain', true, ?)",
            [run_id, start, end, evil, ev],
        )
    html = write_report(db, tmp_path / "report").read_text(encoding="utf-8")
    section = html.split('<section id="health-timeline">', 1)[1].split("</section>", 1)[0]
    assert evil not in section and "&lt;img src=x" in section
