"""Quota recommendations never cut a busy queue: on a month of per-minute Kueue metrics of 16 tenants.

The store is built through the collector's Kueue mapping (tests/support/kueue_month.py), once with the
resource gauge of Kueue >= 0.18 and once with only ``kueue_pending_workloads`` (older Kueue). Whether a
queue had pending work is read from the generated truth, not from the code under test.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from analytics.quota import QuotaRecommendation
from analytics.recommend import RecommendSettings, recommend
from tests.support.cli import gpulens
from tests.support.kueue_month import DAYS, build_store, kept_minutes, queues

TRUTH = {q.name: q for q in queues()}
KEPT = kept_minutes()


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("kueue-month")
    return {v: build_store(base / f"{v}.duckdb", v) for v in ("new", "old")}


def quota_recs(path: Path, window_days: float) -> dict[str, QuotaRecommendation]:
    report = recommend(path, RecommendSettings(window_days=window_days, targets=("kueue",), store_results=False))
    return {q.key.name: q for q in report.quotas}


def waited_in_last(name: str, days: float) -> bool:
    """Whether the queue had pending work in the last ``days`` of the month (scraped minutes only)."""
    q = TRUTH[name]
    first = int((DAYS - days) * 1440)
    return bool(((q.pending[first:] > 0) | (q.waiting[first:] > 0))[KEPT[first:]].any())


def test_the_month_is_shaped_like_the_tenant_trace() -> None:
    busy = TRUTH["busy"]
    share = float((busy.pending > 0).mean())
    demand_p95 = float(np.quantile(busy.usage + busy.pending, 0.95))
    assert len(TRUTH) == 16
    assert 0.32 <= share <= 0.40, share
    assert 68 <= demand_p95 <= 76, demand_p95
    assert busy.quota == 48
    assert not (busy.pending[-4 * 1440:] > 0).any()  # the last 4 days are quiet


@pytest.mark.parametrize("version", ["new", "old"])
@pytest.mark.parametrize("window_days", [2, 3, 4, 14])
def test_a_queue_with_pending_work_is_never_cut(stores: dict[str, Path], version: str, window_days: int) -> None:
    recs = quota_recs(stores[version], window_days)
    busy = recs["busy"]
    assert busy.action != "decrease" and busy.next_value is not None and busy.next_value >= 48, busy.reasons
    for name, rec in recs.items():
        if rec.action == "decrease":
            assert window_days >= 14, (name, rec.reasons)
            assert not waited_in_last(name, 30), (name, rec.reasons)


def test_a_short_window_may_raise_but_never_cut(stores: dict[str, Path]) -> None:
    recs = quota_recs(stores["new"], 3)
    low = recs["steady-low"]
    assert low.action == "hold" and low.next_value == 40
    assert any("the evidence covers 3.0" in r and "--min-cut-days" in r for r in low.reasons), low.reasons
    assert recs["busy"].action == "hold"


def test_a_cut_must_hold_over_the_stored_history(stores: dict[str, Path]) -> None:
    recs = quota_recs(stores["new"], 14)
    quiet = recs["recently-quiet"]
    assert not waited_in_last("recently-quiet", 14) and waited_in_last("recently-quiet", 30)
    assert quiet.action == "hold", quiet.reasons
    assert any("stored history had pending demand" in r for r in quiet.reasons), quiet.reasons
    low = recs["steady-low"]
    assert low.action == "decrease" and low.next_value == 30
    assert any("cut holds over the 30.0 days of stored history" in r for r in low.reasons), low.reasons


def test_pending_workload_counts_block_a_cut_without_the_resource_gauge(stores: dict[str, Path]) -> None:
    gang = quota_recs(stores["old"], 14)["gang"]
    assert gang.action != "decrease" and gang.next_value == 24, gang.reasons
    assert any("kueue_pending_workloads" in r for r in gang.reasons), gang.reasons
    with_gauge = quota_recs(stores["new"], 14)["gang"]
    assert with_gauge.evidence.demand_max >= 22  # 6-12 in use + 16 waiting


def test_the_header_states_the_data_actually_used(stores: dict[str, Path], tmp_path: Path) -> None:
    result = gpulens("recommend", "--db", str(stores["new"]), "--window-days", "60", "--target", "kueue",
                     "--no-store", "--out", str(tmp_path / "recs"))
    assert result.returncode == 0, result.stderr
    header = result.stdout.splitlines()[1]
    assert "31.0 days of data; 60 days asked" in header, header
    assert "2026-03-01 00:00" in header


def test_a_resourcequota_target_on_a_clusterqueue_store_says_what_it_has(
    stores: dict[str, Path], tmp_path: Path
) -> None:
    result = gpulens("recommend", "--db", str(stores["new"]), "--target", "resourcequota", "--no-store",
                     "--out", str(tmp_path / "recs"))
    assert result.returncode == 0, result.stderr
    assert "no ResourceQuota objects in the window" in result.stdout
    assert "16 ClusterQueue entries: use --target kueue" in result.stdout


def test_window_end_defaults_to_the_newest_quota_sample(stores: dict[str, Path]) -> None:
    report = recommend(stores["new"], RecommendSettings(window_days=14, targets=("kueue",), store_results=False))
    assert report.data_span is not None
    first, last = report.data_span
    assert abs((last - first) - timedelta(days=14)) <= timedelta(minutes=5)
