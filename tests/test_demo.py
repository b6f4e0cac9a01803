"""`gpulens demo` runs the whole pipeline end to end, as the README's first command does (the session's
``demo_run``: 15 days at 5 minutes)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.support.demo_run import DemoRun

pytestmark = pytest.mark.slow


def test_demo_succeeds_and_prints_who_holds_what(demo_run: DemoRun) -> None:
    proc = demo_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Who holds what right now" in proc.stderr
    assert "alloc GE" in proc.stdout
    assert "llm-research" in proc.stdout  # a tenant of the built-in scenario


def test_demo_leaves_store_report_and_recommendation_yaml(demo_run: DemoRun) -> None:
    out, proc = demo_run.out, demo_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "report" / "index.html").stat().st_size > 10_000
    assert any((out / "recommendations").glob("*.yaml"))
    with duckdb.connect(str(out / "gpulens.duckdb"), read_only=True) as con:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        assert {"idle_capacity", "fragmentation", "isolation_risk", "health", "chargeback"} <= tables
        live = con.execute("SELECT count(*) FROM device_samples WHERE source <> 'sim'").fetchone()
        backfilled = con.execute("SELECT count(*) FROM device_samples WHERE source = 'sim'").fetchone()
    assert live is not None and live[0] > 0  # scraped from the live exporters
    assert backfilled is not None and backfilled[0] > 0  # virtual-time history
    assert "reconciled" in proc.stdout


def test_demo_rejects_a_bad_step_with_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gpulens.cli", "demo", "--out", str(tmp_path), "--step", "soon"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("gpulens: error:")
    assert "Traceback" not in proc.stderr


def test_demo_shows_placement_findings_end_to_end(demo_run: DemoRun) -> None:
    out, proc = demo_run.out, demo_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Placement by topology: 5 multi-GPU workload(s) measured, 4 spread wider than needed." in proc.stdout
    assert "JobSet/gpt-pretrain" in proc.stdout and "block  2 domains, 1 would do" in proc.stdout
    assert "gpu-h200-train-1/numa-0" in proc.stdout  # free GPUs stranded by topology
    report = (out / "report" / "index.html").read_text(encoding="utf-8")
    assert 'id="placement"' in report and "moe-finetune" in report


def test_demo_shows_early_warnings_with_trend_start_and_lead(
    demo_run: DemoRun,
) -> None:
    out, proc = demo_run.out, demo_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "early warnings:" in proc.stdout and "GPU(s) warned before they failed, lead" in proc.stdout
    assert "trend since" in proc.stdout and "h before the failure" in proc.stdout
    with duckdb.connect(str(out / "gpulens.duckdb"), read_only=True) as con:
        leads = con.execute(
            "SELECT lead_seconds FROM health WHERE scope = 'gpu' AND lead_seconds IS NOT NULL"
        ).fetchall()
    # The backfill ends now, so where a GPU's simulated run-up falls depends on the time of day: a GPU
    # whose precursors began before the first sample is warned late (or at its failure), never after it.
    assert leads and all(lead >= 0 for (lead,) in leads), leads
    assert max(lead for (lead,) in leads) >= 1800, leads


def test_demo_runs_the_whole_loop_and_says_each_decision_in_one_line(demo_run: DemoRun) -> None:
    """A quota cut with its evidence, a plan where every pool fits, n+1 on the dedicated pools as a what-if,
    a failing GPU's node quarantined under the default guard rails, and a MIG layout that fits."""
    out, proc = demo_run.out, demo_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr[proc.stderr.index("What the loop decided on this fleet:"):].splitlines()
    said = {line.split(":")[0].removeprefix("  - "): line for line in lines if line.startswith("  - ")}
    assert said["quota cut"].startswith("  - quota cut: ClusterQueue ") and " -> " in said["quota cut"]
    assert "evidence: demand (in use + pending) over 14.0 days" in said["quota cut"]
    assert "11 flavor/resource pool(s)" in said[next(k for k in said if k.startswith("quota plan "))]
    assert any("every pool fits its capacity" in line for line in said.values())
    assert ("what if the dedicated pools kept an n+1 reserve too: CONFLICT in 2 pool(s) "
            "(h100-80gb/nvidia.com/gpu short ") in said["what if the dedicated pools kept an n+1 reserve too"]
    assert re.search(r"quarantine gpu-h100-train-\d \(node taint: drain\); \d+ held back by the guard rails$",
                     said["remediate (dry run, default guard rails)"])
    # A workload moves whole or not at all, onto healthy GPUs: a fit may repartition a GPU or reuse free instances.
    assert re.match(r"  - MIG layout: fits [1-9]\d* of \d+ workload\(s\) \((gpu-|on existing free MIG devices)",
                    said["MIG layout"])
    with duckdb.connect(str(out / "gpulens.duckdb"), read_only=True) as con:
        plan = con.execute("SELECT cluster_queue, flavor, current_quota, planned_quota, capacity, drained, "
                           "binding_constraint, conflict FROM quota_plan").fetchall()
        taints = con.execute("SELECT count(*) FROM remediation_outcomes WHERE action = 'taint'").fetchone()
    assert plan and all(row[6] != "conflict" and row[7] is None for row in plan)
    by_entry = {(q, f): (current, planned, capacity, drained) for q, f, current, planned, capacity, drained, _, _
                in plan}
    current, planned, capacity, drained = by_entry[("llm-research", "h100-80gb")]
    # its failing GPUs are out (at most 4 of them, so one step of 25 % reaches): cut to what the pool holds
    assert current == 16 and 1 <= drained <= 4 and planned == capacity == 16 - drained
    assert by_entry[("foundation", "h200-80gb")][:2] == (24, 24)
    assert taints == (1,)
    assert any((out / "plan").glob("clusterqueue-*.yaml")) and any((out / "remediation").iterdir())
    with duckdb.connect(str(out / "gpulens.duckdb"), read_only=True) as con:
        reserves = dict(con.execute("SELECT DISTINCT flavor, reserve FROM quota_plan WHERE flavor IN "
                                    "('h100-80gb', 'h200-80gb')").fetchall())
    assert reserves == {"h100-80gb": 0, "h200-80gb": 0}  # the pools dedicated to one team keep no n+1 reserve
    report = (out / "report" / "index.html").read_text(encoding="utf-8")
    section = report[report.index('id="plan"'):]
    assert "Quota plan " in section and "llm-research" in section and "run `gpulens plan" not in section
