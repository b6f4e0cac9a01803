"""A store with Kueue metrics and no device samples: analyze what the data allows, say what was skipped."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytics.result_tables import RESULT_TABLES
from analytics.run import analyze
from analytics.settings import AnalysisSettings
from dashboards.report import write_report
from tests.support.cli import gpulens
from tests.support.recommend_store import StoreBuilder


@pytest.fixture
def kueue_only(tmp_path: Path) -> Path:
    """Two ClusterQueues scraped from Kueue for a day: team-b saturates its quota and work waits."""
    s = StoreBuilder(tmp_path / "kueue.duckdb")
    s.quota("ClusterQueue", "team-a", "nvidia.com/gpu", flavor="h100", tenant="team-a", nominal=16,
            usage=[4 + (i % 4) for i in range(288)])
    s.quota("ClusterQueue", "team-b", "nvidia.com/gpu", flavor="h100", tenant="team-b", nominal=8, usage=[8] * 288)
    s.pending("team-b", "nvidia.com/gpu", {i: 3 for i in range(100, 200)}, cluster_queue="team-b")
    return s.save()


def test_analyze_reports_quota_use_and_says_which_analyses_were_skipped(kueue_only: Path) -> None:
    summary = analyze(kueue_only, AnalysisSettings(window_seconds="1d", bucket_seconds="5m"))
    assert set(summary.skipped) == set(RESULT_TABLES)
    assert all("no device samples" in why for why in summary.skipped.values())
    queues = {q.name: q for q in summary.queues}
    assert (queues["team-a"].nominal, queues["team-a"].usage_peak, queues["team-a"].pending_buckets) == (16, 7, 0)
    assert (queues["team-b"].pending_buckets, queues["team-b"].pending_peak) == (100, 3)
    text = summary.render()
    assert "skipped (not measured, not zero)" in text and "no device samples" in text
    assert "capacity" not in text.split("skipped")[0]  # no GE-hours or $ claimed for a fleet never measured


def test_the_cli_analyzes_and_the_report_renders_with_the_skip_reasons(kueue_only: Path, tmp_path: Path) -> None:
    proc = gpulens("analyze", "--db", str(kueue_only), "--window", "1d")
    assert proc.returncode == 0, proc.stderr
    assert "ClusterQueue team-b h100 nvidia.com/gpu: quota 8" in proc.stdout
    index = write_report(kueue_only, tmp_path / "report")
    html = index.read_text()
    assert "was skipped by analysis run" in html and "no device samples" in html
    assert "results yet: run `gpulens analyze" not in html  # analyze ran: it cannot be asked for again


def test_a_store_with_neither_devices_nor_queues_is_still_one_clear_line(tmp_path: Path) -> None:
    empty = StoreBuilder(tmp_path / "empty.duckdb")
    empty.quota("ClusterQueue", "old", "nvidia.com/gpu", nominal=1, usage=[1])
    path = empty.save()
    proc = gpulens("analyze", "--db", str(path), "--window", "1d", "--end", "2027-01-01T00:00:00Z")
    assert proc.returncode == 2 and "no quota or pending data" in proc.stderr
