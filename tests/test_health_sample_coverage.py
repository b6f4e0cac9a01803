"""Health from the monitoring itself: a GPU whose samples stop or thin out warns (never "healthy") and its
node shows in the health timeline with the time the samples stopped."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from dashboards.report.data import StoreReader
from dashboards.report.health_timeline import node_timelines
from tests.support.analytics_fleet import T0, Fleet

END = T0 + timedelta(hours=2)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four GPUs sampled every minute for two hours, except SILENT (nothing after 60 min: its exporter stopped)
    and THIN (one sample in five in the last hour: scrapes failing)."""
    path = tmp_path_factory.mktemp("coverage") / "store.duckdb"
    f = Fleet(path)
    f.node("a")
    f.node("b")
    for gpu, node in (("FINE-1", "a"), ("FINE-2", "a"), ("SILENT", "b"), ("THIN", "a")):
        f.gpu(gpu, node)
        for i in range(120):
            if gpu == "SILENT" and i >= 60 or gpu == "THIN" and i >= 60 and i % 5:
                continue
            f.gpu_sample(gpu, T0 + timedelta(minutes=i), up=True, ecc_uncorrected_total=0)
    f.close()
    return path


@pytest.fixture(scope="module")
def health(store: Path) -> dict[str, tuple[str, list[dict[str, object]]]]:
    run = analyze(store, AnalysisSettings(window_seconds=7200, bucket_seconds=3600, end=END)).run_id
    with duckdb.connect(str(store), read_only=True) as con:
        rows = con.execute("SELECT coalesce(gpu_uuid, node), state, evidence FROM health WHERE run_id = ?",
                           [run]).fetchall()
    return {k: (state, json.loads(ev)) for k, state, ev in rows}


def flagged(evidence: list[dict[str, object]]) -> list[str]:
    return [str(e["signal"]) for e in evidence if e["severity"] != "unmeasured"]


def test_a_gpu_whose_samples_stopped_warns_with_the_time_they_stopped(health) -> None:  # type: ignore[no-untyped-def]
    state, evidence = health["SILENT"]
    assert state == "warn" and flagged(evidence) == ["samples_stopped"]
    (stopped,) = [e for e in evidence if e["signal"] == "samples_stopped"]
    assert stopped["since"] == (T0 + timedelta(minutes=59)).isoformat()
    assert "exporter stopped answering or its metrics vanished" in str(stopped["reason"])
    assert health["b"][0] == "warn", "the node takes its GPU's state"


def test_a_gpu_whose_samples_thinned_out_warns_and_a_fully_sampled_one_stays_ok(health) -> None:  # type: ignore[no-untyped-def]
    state, evidence = health["THIN"]
    assert state == "warn" and flagged(evidence) == ["samples_thinned"]
    assert health["FINE-1"][0] == "ok" and flagged(health["FINE-1"][1]) == []


def test_the_silent_gpus_node_is_in_the_health_timeline_from_the_time_its_samples_stopped(
    store: Path, health: dict[str, tuple[str, list[dict[str, object]]]],
) -> None:
    assert health, "the store is analysed"
    reader = StoreReader.open(store)
    try:
        timelines = {t.node: t for t in node_timelines(reader)}
    finally:
        reader.close()
    events = [(e.ts, e.text) for e in timelines["b"].events]
    assert (T0 + timedelta(minutes=59), "samples stopped (exporter silent or metrics vanished)") in events
    assert any(text.startswith("ok -> warn (samples stopped") for _, text in events)


def test_the_fleet_median_of_an_even_count_is_the_mean_of_the_middle_two_and_a_stopped_gpu_is_not_counted() -> None:
    from analytics.facts import Window
    from analytics.sample_coverage import THINNED, coverage_gaps
    from analytics.settings import HealthRules

    end = T0 + timedelta(hours=1)
    counts = {"A": 12, "B": 13, "C": 37, "D": 40}  # median (13 + 37) / 2 = 25: under half of it is under 12.5
    con = duckdb.connect()
    con.execute("CREATE TABLE f_gpu_samples (gpu_uuid VARCHAR, ts TIMESTAMP)")
    for gpu, n in counts.items():
        con.executemany("INSERT INTO f_gpu_samples VALUES (?, ?)",
                        [(gpu, end - timedelta(seconds=60 * i)) for i in range(n)])
    con.execute("INSERT INTO f_gpu_samples VALUES ('GONE', ?)", [T0])  # one sample: stopped, not in the median
    con.execute("CREATE TEMP TABLE an_health_window AS SELECT gpu_uuid, max(ts) AS last_ts FROM f_gpu_samples "
                "GROUP BY gpu_uuid")
    gaps = coverage_gaps(con, Window(T0, end + timedelta(seconds=1), 3600), HealthRules())
    assert [(g.gpu_uuid, g.signal) for g in gaps] == [("GONE", "samples_stopped"), ("A", THINNED)]
    thin = gaps[1]
    assert (thin.value, thin.threshold) == (12, 12.5)
    assert "fleet's median (25)" in thin.reason
