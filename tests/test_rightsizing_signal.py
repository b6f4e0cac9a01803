"""Rightsizing on the right signal: DCGM profiling fields before GPU_UTIL, and the evidence names it."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl

from analytics.facts import bind_facts
from analytics.rightsizing import MigFitSettings, MigFitStrategy, load_workload_usage
from collector.mapping import map_dcgm, normalize_dcgm_labels
from tests.support.recommend_store import StoreBuilder, gib

GR, SM, UTIL = "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_DEV_GPU_UTIL"


def dcgm_long(values: dict[str, float]) -> pl.DataFrame:
    """One dcgm-exporter scrape of one whole GPU with the given fields."""
    rows = [{"metric": m, "value": v, "ts_ms": 1_700_000_000_000, "UUID": "GPU-1", "Hostname": "n1", "gpu": "0",
             "modelName": "NVIDIA H100 80GB HBM3"} for m, v in values.items()]
    rows += [{"metric": "DCGM_FI_DEV_FB_USED", "value": 1024.0, "ts_ms": 1_700_000_000_000, "UUID": "GPU-1",
              "Hostname": "n1", "gpu": "0", "modelName": "NVIDIA H100 80GB HBM3"}]
    return pl.DataFrame(rows)


def stored_activity(values: dict[str, float]) -> tuple[float, str]:
    frame = map_dcgm(normalize_dcgm_labels(dcgm_long(values)), "test")["device_samples"]
    return frame["activity_ratio"][0], frame["activity_signal"][0]


def test_the_collector_prefers_profiling_fields_and_records_which_one_it_used() -> None:
    assert stored_activity({UTIL: 90.0, GR: 0.12, SM: 0.08}) == (0.12, GR)
    assert stored_activity({UTIL: 90.0, SM: 0.08}) == (0.08, SM)
    assert stored_activity({UTIL: 90.0}) == (0.9, UTIL)


def test_a_workload_with_profiling_readings_is_sized_on_them_not_on_gpu_util(tmp_path: Path) -> None:
    """A serving pod whose first days came from GPU_UTIL (a 90 % duty cycle) and whose later days from
    GR_ENGINE_ACTIVE (10 % of the engine): the profiling readings decide, and the evidence says so."""
    store = StoreBuilder(tmp_path / "s.duckdb")
    store.device("g0", "H100")
    switch = 4 * 288
    store.workload("team-a", "Deployment", "chat", {"chat-0": ["g0"]}, samples=8 * 288,
                   activity=lambda i: 0.9 if i < switch else 0.1, memory=lambda i: gib(8),
                   signal=lambda i: UTIL if i < switch else GR)
    path = store.save()
    with duckdb.connect(str(path)) as con:
        bind_facts(con, None)  # the loaders read the f_* fact views
        end = datetime(2026, 11, 9)
        (usage,) = load_workload_usage(con, end - timedelta(days=14), end)
    assert usage.activity_signals == (GR,)
    assert usage.compute_p95_ge is not None and abs(usage.compute_p95_ge - 0.1) < 1e-9
    rec = MigFitStrategy(MigFitSettings()).run(usage, 300)
    assert rec.recommended_profile == "1g.10gb"
    assert any(f"from {GR}" in r for r in rec.reasons), rec.reasons


def test_without_profiling_the_evidence_says_gpu_util_or_that_the_signal_is_unknown(tmp_path: Path) -> None:
    store = StoreBuilder(tmp_path / "s.duckdb")
    store.device("g0", "H100")
    store.device("g1", "H100")
    store.workload("team-a", "Deployment", "util", {"u-0": ["g0"]}, samples=400, activity=lambda i: 0.5,
                   memory=lambda i: gib(8), signal=lambda i: UTIL)
    store.workload("team-a", "Deployment", "old", {"o-0": ["g1"]}, samples=400, activity=lambda i: 0.5,
                   memory=lambda i: gib(8))
    path = store.save()
    with duckdb.connect(str(path)) as con:
        bind_facts(con, None)  # the loaders read the f_* fact views
        end = datetime(2026, 11, 9)
        usages = {u.name: u for u in load_workload_usage(con, end - timedelta(days=14), end)}
    assert usages["util"].activity_signals == (UTIL,)
    assert usages["old"].activity_signals == ("activity_ratio (signal not recorded)",)
    rec = MigFitStrategy(MigFitSettings()).run(usages["util"], 300)
    assert any(f"from {UTIL}" in r for r in rec.reasons)
