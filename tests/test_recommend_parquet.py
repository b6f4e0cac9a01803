"""`gpulens recommend --parquet`: facts exported to Parquet give the same recommendations as the store."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from analytics.facts import FACT_TABLES
from analytics.recommend import RecommendationReport, RecommendSettings
from analytics.recommend import recommend as run_recommend
from analytics.result_tables import column_names
from collector.parquet import export_parquet
from collector.schema import STORED_AS_CLAIMS
from tests.support.recommend_store import StoreBuilder, gib

DAY = 288  # samples at a 5-minute step


def bursty(i: int) -> float | None:
    """A serving workload: mostly idle, short bursts, and readings missing for an hour each day."""
    if i % DAY < 12:
        return None
    return 0.35 if i % 100 < 4 else 0.02


def build(path: Path) -> Path:
    s = StoreBuilder(path)
    s.device("a0", "A100")
    s.device("h0", "H100")
    s.device("h1", "H100")
    s.workload("serve", "Deployment", "api", {"api-0": ["a0"]}, samples=14 * DAY, activity=bursty,
               memory=lambda i: gib(6 + (i % 7)), tenant="serve")
    s.workload("train", "JobSet", "llm", {"llm-0": ["h0"], "llm-1": ["h1"]}, samples=14 * DAY,
               activity=lambda i: 0.9 if i % 50 else None, memory=lambda i: gib(70), tenant="train")
    s.quota("ClusterQueue", "serve", "nvidia.com/gpu", flavor="a100", tenant="serve", nominal=8,
            usage=[1 + (i % 3 == 0) for i in range(16 * DAY)], first=-2 * DAY)
    s.quota("ResourceQuota", "gpu-quota", "requests.nvidia.com/gpu", namespace="train", tenant="train",
            nominal=4, usage=[2] * (16 * DAY), first=-2 * DAY)
    s.pending("train", "nvidia.com/gpu", {i: 1 for i in range(13 * DAY, 13 * DAY + 24)}, namespace="train")
    return s.save()


def gpulens(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpulens.cli", *args], capture_output=True, text=True,
                          timeout=300, check=False)


AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def recommend(store: Path, settings: RecommendSettings, parquet_dir: Path | None = None) -> RecommendationReport:
    """``recommend`` at one fixed time: ``render()`` prints when a run was made."""
    return run_recommend(store, settings, parquet_dir=parquet_dir, clock=lambda: AT)


def test_recommend_reads_its_facts_from_parquet_history_and_decides_the_same(tmp_path: Path) -> None:
    store = build(tmp_path / "store.duckdb")
    settings = RecommendSettings(store_results=False)
    from_store = recommend(store, settings)
    assert from_store.workloads and from_store.quotas
    export_parquet(str(store), tmp_path / "export")
    with duckdb.connect(str(store)) as con:
        for table in FACT_TABLES:  # the facts now live only in Parquet
            con.execute(f"DELETE FROM {STORED_AS_CLAIMS.get(table, table)}")  # noqa: S608 - constant names
    assert recommend(store, settings).workloads == (), "the store alone no longer has the evidence"
    from_parquet = recommend(store, settings, parquet_dir=tmp_path / "export")
    assert from_parquet.workloads == from_store.workloads
    assert from_parquet.quotas == from_store.quotas
    assert from_parquet.render() == from_store.render()

    proc = gpulens("recommend", "--db", str(store), "--parquet", str(tmp_path / "export"), "--no-store",
                   "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "ClusterQueue serve" in proc.stdout and "serve/Deployment/api" in proc.stdout.replace(" ", "")


def test_recommendations_are_stored_by_column_name_in_the_registered_table(tmp_path: Path) -> None:
    store = build(tmp_path / "store.duckdb")
    report = recommend(store, RecommendSettings())
    with duckdb.connect(str(store), read_only=True) as con:
        columns = [r[0] for r in con.execute("DESCRIBE recommendations").fetchall()]
        rows = con.execute("SELECT scope, target_kind, target_name, flavor, resource, action, confidence_label "
                           "FROM recommendations WHERE run_id = ? ORDER BY ALL", [report.run_id]).fetchall()
    assert columns == column_names("recommendations")
    quota = [r for r in rows if r[0] == "quota"]
    assert [(r[1], r[2], r[3], r[4]) for r in quota] == [
        ("ClusterQueue", "serve", "a100", "nvidia.com/gpu"), ("ResourceQuota", "gpu-quota", "", "nvidia.com/gpu")]
    assert {r[2] for r in rows if r[0] == "workload"} == {"api", "llm"}
    assert all(r[5] and r[6] for r in rows if r[0] != "mig_conversion")
