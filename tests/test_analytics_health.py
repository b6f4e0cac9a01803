"""Health on hand-built GPUs: each GPU carries one signal, its state is worked out from the defaults."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.health import classify_xid
from analytics.run import analyze
from analytics.settings import AnalysisSettings, HealthRules
from tests.support.analytics_fleet import T0, Fleet

END = T0 + timedelta(hours=1)
LATER = T0 + timedelta(minutes=1)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("a")
    f.node("b")
    gpus = {"APP": "a", "LOST": "b", "PAGES": "a", "HOT": "a", "DBE": "a", "CRC": "a", "FINE": "a", "REMAP": "a"}
    for gpu, node in gpus.items():
        f.gpu(gpu, node)
        f.samples(gpu, count=2)
    f.xid("APP", 13, T0, count=5)
    f.xid("APP", 31, T0)
    f.xid("LOST", 79, T0 + timedelta(minutes=3))
    f.gpu_sample("PAGES", T0, retired_pages_total=63)
    f.gpu_sample("HOT", T0, thermal_violation_seconds_total=10.0)
    f.gpu_sample("HOT", LATER, thermal_violation_seconds_total=15.0)
    f.gpu_sample("DBE", T0, ecc_uncorrected_total=0)
    f.gpu_sample("DBE", LATER, ecc_uncorrected_total=1)
    f.gpu_sample("CRC", T0, nvlink_crc_errors_total=0)
    f.gpu_sample("CRC", LATER, nvlink_crc_errors_total=6000)
    f.gpu_sample("FINE", T0, up=True, retired_pages_total=62, ecc_uncorrected_total=4, nvlink_crc_errors_total=5)
    f.gpu_sample("FINE", LATER, up=True, retired_pages_total=62, ecc_uncorrected_total=4, nvlink_crc_errors_total=50)
    f.gpu_sample("REMAP", T0, remapped_rows_failure=True)
    f.close()
    return path


def test_each_signal_gives_the_state_the_reference_asks_for(store: Path) -> None:
    summary = analyze(store, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=END))
    con = duckdb.connect(str(store), read_only=True)
    rows = con.execute(
        "SELECT scope, coalesce(gpu_uuid, node), state, drain_candidate, evidence FROM health WHERE run_id = ?",
        [summary.run_id],
    ).fetchall()
    con.close()
    state = {(s, k): st for s, k, st, _, _ in rows}
    assert state == {
        ("gpu", "APP"): "ok",  # application XIDs never drain
        ("gpu", "LOST"): "drain",  # XID 79, fallen off the bus
        ("gpu", "PAGES"): "drain",  # retired pages >= 63
        ("gpu", "HOT"): "warn",  # 5 s of thermal violation
        ("gpu", "DBE"): "drain",  # a new double-bit ECC error
        ("gpu", "CRC"): "warn",  # 6000 CRC errors in 60 s = 100/s
        ("gpu", "FINE"): "ok",  # 62 pages, old DBEs, 0.75 CRC/s
        ("gpu", "REMAP"): "drain",
        ("node", "a"): "drain",
        ("node", "b"): "drain",
    }
    evidence = {k: json.loads(ev) for s, k, _, _, ev in rows if s == "gpu"}
    measured = {k: [e for e in ev if e["severity"] != "unmeasured"] for k, ev in evidence.items()}
    assert [(e["signal"], e["severity"], e["value"]) for e in measured["APP"]] == [
        ("xid_13", "info", 5),
        ("xid_31", "info", 1),
    ]
    assert measured["FINE"] == []
    assert {d.gpu_uuid for d in summary.drain_candidates} == {"LOST", "PAGES", "DBE", "REMAP"}
    lost = next(d for d in summary.drain_candidates if d.gpu_uuid == "LOST")
    assert "XID 79" in lost.evidence


def test_xid_classes_are_configurable_but_application_errors_never_drain() -> None:
    rules = HealthRules(drain_xids=frozenset({79, 109}))
    assert classify_xid(109, rules) == "drain"
    assert classify_xid(13, rules) == "info"
    assert classify_xid(999, rules) == "warn"
    with pytest.raises(ValueError, match="application errors"):
        HealthRules(drain_xids=frozenset({13, 79}))


def test_signals_without_readings_are_listed_as_not_measured_never_as_fine(store: Path) -> None:
    summary = analyze(store, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=END))
    con = duckdb.connect(str(store), read_only=True)
    rows = dict(con.execute(
        "SELECT gpu_uuid, evidence FROM health WHERE run_id = ? AND scope = 'gpu'", [summary.run_id]
    ).fetchall())
    con.close()
    unmeasured = {g: [e for e in json.loads(ev) if e["severity"] == "unmeasured"] for g, ev in rows.items()}
    (app,) = unmeasured["APP"]  # no physical readings at all
    assert app["signal"] == "not_measured" and "no physical readings" in app["reason"]
    assert "ecc_double_bit" in app["reason"] and "not checked" in app["reason"]
    (fine,) = unmeasured["FINE"]  # readings, but no row-remap or thermal counters
    assert "row_remap_failure" in fine["reason"] and "thermal_violation_seconds" in fine["reason"]
    assert "retired_pages" not in fine["reason"] and "ecc_double_bit" not in fine["reason"]


def test_a_trend_raised_with_the_failure_is_no_lead() -> None:
    """The trend's bucket ended when the XID came: it warned with the failure, not before it."""
    from analytics.health import Evidence, GpuHealth

    failed = datetime(2026, 1, 5, 8, 0)

    def gpu(warned: datetime) -> GpuHealth:
        return GpuHealth("n0", "GPU-0", "drain", (
            Evidence("trend_ecc_corrected_per_hour", 5.0, 1.0, "watch", "rising", warned - timedelta(hours=2), warned),
            Evidence("xid_79", 1.0, None, "drain", "fell off the bus", failed, failed),
        ))

    assert gpu(failed).lead_seconds is None
    assert gpu(failed - timedelta(minutes=15)).lead_seconds == 900.0
