"""The recommend() API the CLI and the demo call: report, result table, dry-run files, MIG proposals."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from analytics.recommend import RecommendSettings, recommend, write_dry_run
from collector.store_errors import StoreMissing
from tests.support.recommend_cluster import CUT_HISTORY, WEEK, build_writer_store
from tests.support.recommend_store import StoreBuilder, gib

NOW = datetime(2026, 11, 9, 12, 0)


def serving_fleet(path: Path) -> Path:
    """team-a runs two idle-most-of-the-time servers on whole H200s, holding tens of GiB each."""
    s = StoreBuilder(path)
    for g in range(2):
        s.device(f"g{g}", "H200", node=f"node-{g}")
    s.workload("team-a", "Deployment", "chat", {"chat-0": ["g0"], "chat-1": ["g1"]}, samples=WEEK, tenant="team-a",
               activity=lambda i: 0.3 if i % 50 == 0 else 0.0, memory=lambda i: gib(24) + (i % 5) * gib(0.1))
    s.quota("ClusterQueue", "team-a", "nvidia.com/gpu", flavor="h200", tenant="team-a", nominal=4,
            usage=[2] * CUT_HISTORY, first=WEEK - CUT_HISTORY)
    return s.save()


def test_the_report_explains_workloads_quotas_and_mig_proposals(tmp_path: Path) -> None:
    report = recommend(serving_fleet(tmp_path / "s.duckdb"), clock=lambda: NOW)
    (chat,) = report.workloads
    assert (chat.recommended_profile, chat.action, chat.usage.max_replicas) == ("1g.35gb", "shrink", 2)
    (conversion,) = report.conversions
    assert (conversion.whole_gpus, conversion.mig_instances, conversion.gpus_needed) == (2, 2, 1)
    text = report.render()
    assert "team-a/Deployment/chat [team-a] H200: gpu x1 -> 1g.35gb x1  SHRINK" in text
    assert "nvidia.com/gpu 2 -> nvidia.com/mig-1g.35gb 2" in text
    assert "ClusterQueue team-a flavor h200 nvidia.com/gpu [team-a]: 4 -> 3" in text
    (obj,) = report.recommendation_objects()
    assert obj["status"]["migConversions"][0]["resource"] == "nvidia.com/mig-1g.35gb"


def test_results_are_stored_with_window_and_parameters_and_a_rerun_replaces_them(tmp_path: Path) -> None:
    path = serving_fleet(tmp_path / "s.duckdb")
    settings = RecommendSettings(window_days=10, quota={"min_cut_days": 10})
    first = recommend(path, settings, clock=lambda: NOW)
    again = recommend(path, settings, clock=lambda: NOW)
    assert first.run_id == again.run_id
    with duckdb.connect(str(path), read_only=True) as con:
        rows = con.execute(
            "SELECT scope, target_name, action, window_start, window_end, parameters FROM recommendations "
            "ORDER BY scope"
        ).fetchall()
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("mig_conversion", "team-a", "propose_mig"), ("quota", "team-a", "decrease"), ("workload", "chat", "shrink")]
    assert rows[0][4] == first.window_end and (rows[0][4] - rows[0][3]).days == 10
    assert json.loads(rows[0][5])["window_days"] == 10
    other = recommend(path, RecommendSettings(window_days=10, quota={"percentile": 0.5, "min_cut_days": 10}),
                      clock=lambda: NOW)
    assert other.run_id != first.run_id
    with duckdb.connect(str(path), read_only=True) as con:
        assert con.execute("SELECT count(DISTINCT run_id) FROM recommendations").fetchone() == (2,)


def test_an_object_opted_out_in_the_store_gets_no_apply_yaml(tmp_path: Path) -> None:
    report = recommend(build_writer_store(tmp_path / "s.duckdb", snapshot_opt_out=True), clock=lambda: NOW)
    names = {p.name for p in write_dry_run(report, tmp_path / "out")}
    assert "clusterqueue-team-b.yaml" not in names and "clusterqueue-team-a.yaml" in names
    assert 'ClusterQueue team-b: would be skipped: annotated gpulens.io/auto-apply: "false"' in report.render()


def test_a_missing_store_is_reported_not_created(tmp_path: Path) -> None:
    with pytest.raises(StoreMissing, match="no store at"):
        recommend(tmp_path / "nope.duckdb")
    assert not (tmp_path / "nope.duckdb").exists()


def test_a_new_dry_run_replaces_only_the_files_an_earlier_run_wrote(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "clusterqueue-gone.yaml").write_text("# written by `gpulens recommend` (run old)\nkind: ClusterQueue\n")
    (out / "mine.yaml").write_text("kind: ConfigMap\n")
    report = recommend(serving_fleet(tmp_path / "s.duckdb"), clock=lambda: NOW)
    names = {p.name for p in write_dry_run(report, out)}
    assert {p.name for p in out.iterdir()} == names | {"mine.yaml"}
    text = (out / "clusterqueue-team-a.yaml").read_text()
    assert text.startswith("# written by `gpulens recommend` (run ")
    assert "# resourceGroups is an atomic list" in text
