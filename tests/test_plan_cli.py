"""`gpulens plan` as a user runs it: the real CLI on the demo store (simulated fleet, 15 days) and bad input."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
import yaml

from tests.support.cli import assert_one_line_error, gpulens
from tests.support.demo_run import DemoRun
from tests.support.recommend_cluster import gpu_nominal

N_PLUS_1_ON_THE_GROWN_H100S = "reserve: {flavors: {h100-80gb: n+1}}\n"
"""The capacity file grows llm-research's dedicated H100 flavor to 32: n+1 named there keeps a reserve line on the
page (a pool dedicated to one team keeps none by default)."""


@pytest.fixture(scope="module")
def demo_store(demo_run: DemoRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This module's copy of the session's demo store: `plan` records its quota plans in it."""
    assert demo_run.proc.returncode == 0, demo_run.proc.stderr
    return demo_run.copy_store(tmp_path_factory.mktemp("plan-demo"))


def _run_id(stdout: str) -> str:
    found = re.search(r"gpulens quota plan \(run ([0-9a-f]+)\)", stdout)
    assert found is not None, stdout
    return found[1]



def test_on_the_demo_store_n_plus_1_on_the_full_dedicated_pools_is_a_conflict_and_only_they_keep_their_quotas(
    demo_store: Path, tmp_path: Path
) -> None:
    """A policy that keeps the largest node back on the dedicated pools too: llm-research's 16 H100s (some of
    them drain candidates) can be cut one step to 12 at most, foundation's 24 H200s to 18, and neither fits what
    n+1 leaves. Those two pools keep their quotas; the others are written, and the exit status is 3."""
    out = tmp_path / "plan"
    policy = tmp_path / "n-plus-1.yaml"
    policy.write_text("reserve: {flavors: {h100-80gb: n+1, h200-80gb: n+1}}\n", encoding="utf-8")
    proc = gpulens("plan", "--db", str(demo_store), "--out", str(out), "--policy", str(policy))
    assert proc.returncode == 3, proc.stderr
    pool = re.search(r"h100-80gb nvidia.com/gpu: 16 units \(inventory\) - (\d+) on drain candidates \((gpu-h100-train-[^)]*)\)"
                     r" - reserve (\d+) \[n\+1 \(largest node: \d+\)\] = (\d+) for nominal quotas", proc.stdout)
    assert pool is not None, proc.stdout
    drained, reserve, capacity = int(pool[1]), int(pool[3]), int(pool[4])
    assert drained >= 1 and capacity == 16 - drained - reserve  # the demo's degrading training GPUs
    assert f"CONFLICT (short {12 - capacity})" in proc.stdout and "cuts limited to one step 12" in proc.stdout
    assert "h200-80gb nvidia.com/gpu: 24 units (inventory) - reserve 8 [n+1 (largest node: 8)]" in proc.stdout
    assert "foundation keeps 24: one step per apply: floors add up to 18" in proc.stdout
    assert proc.stderr.strip() == ("gpulens: error: 2 flavor/resource pool(s) in conflict keep their quotas "
                                   "(h100-80gb/nvidia.com/gpu, h200-80gb/nvidia.com/gpu); the other pools are planned")
    written = sorted(p.name for p in out.glob("*.yaml"))
    assert "clusterqueue-search-ranking.yaml" in written and "clusterqueue-llm-research.yaml" not in written
    foundation = yaml.safe_load((out / "clusterqueue-foundation.yaml").read_text())
    assert gpu_nominal(foundation, "a100-pcie") == 6 and gpu_nominal(foundation, "h200-80gb") == 24  # the cut; as it is
    with duckdb.connect(str(demo_store), read_only=True) as con:
        conflicts = con.execute("SELECT cluster_queue, flavor FROM quota_plan WHERE run_id = ? AND "
                                "binding_constraint = 'conflict' ORDER BY 1", [_run_id(proc.stdout)]).fetchall()
    assert conflicts == [("foundation", "h200-80gb"), ("llm-research", "h100-80gb")]


def test_on_the_demo_store_the_default_plan_fits_and_the_dedicated_pools_keep_no_reserve(
    demo_store: Path, tmp_path: Path
) -> None:
    """The demo's pools dedicated to one team (every node labelled for it) keep no n+1 reserve by default: a
    lost node there hurts only that team. Every pool fits, and the plan says why for each dedicated pool."""
    proc = gpulens("plan", "--db", str(demo_store), "--out", str(tmp_path / "plan"))
    assert proc.returncode == 0, proc.stderr
    for flavor, tenant in (("h100-80gb", "llm-research"), ("h200-80gb", "foundation")):
        assert (f"reserve 0 [every node dedicated to {tenant}, the only tenant a lost node hurts: 0 kept; "
                f"reserve: {{flavors: {{{flavor}: n+1}}}} keeps n+1]") in proc.stdout
    assert "CONFLICT" not in proc.stdout


def test_on_the_demo_store_with_capacity_the_plan_writes_clusterqueue_yaml(demo_store: Path, tmp_path: Path) -> None:
    capacity = tmp_path / "capacity.yaml"
    capacity.write_text("flavors:\n  h100-80gb:\n    nvidia.com/gpu: 32\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text("queues:\n  foundation: {weight: 2}\nfair_sharing_weight: true\nkueue_version: v1beta1\n")
    out = tmp_path / "plan"
    proc = gpulens("plan", "--db", str(demo_store), "--capacity", str(capacity), "--policy", str(policy),
                   "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "h100-80gb nvidia.com/gpu: 32 units (capacity file)" in proc.stdout
    assert "llm-research gets 16, what recommend asks" in proc.stdout  # room for all 16 it uses
    assert "dry run: nothing applied" in proc.stdout
    body = yaml.safe_load((out / "clusterqueue-foundation.yaml").read_text())
    assert body["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert body["spec"]["fairSharing"] == {"weight": 2}
    assert gpu_nominal(body, "a100-pcie") == 6  # 8, uses 4 for 14 days: one step of 25% down
    assert body["metadata"]["annotations"]["gpulens.io/applied-to"] == '{"a100-pcie/nvidia.com/gpu": 6}'


def test_what_if_more_capacity_shows_who_stops_waiting_and_writes_nothing(demo_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "plan"
    proc = gpulens("plan", "--db", str(demo_store), "--add-capacity", "h200-mig/nvidia.com/mig-1g.18gb=8",
                   "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "what if: h200-mig/nvidia.com/mig-1g.18gb +8 (dry run, nothing written or stored)" in proc.stdout
    # The demo's pending work depends on the hour it ended, so this says only what holds at any hour (which
    # queue stops waiting is specified on pools built by hand: tests/test_plan_what_if.py): ml-notebooks, short on
    # this flavor, gains; no target falls; a queue stops waiting only where its target rose and it had pending work.
    flavor = proc.stdout.split("h200-mig nvidia.com/mig-1g.18gb:", 1)[1].split("\n\n", 1)[0]
    pending = {t: int(p) for t, p in re.findall(r"^  (\S+) +w\d+ .*pending (\d+)% of the window\)", flavor, re.M)}
    what_if = re.findall(r"^  (\S+) h200-mig/nvidia.com/mig-1g.18gb: target (\d+) -> (\d+) \(\+\d+\)(.*)$", proc.stdout, re.M)
    assert any(t == "ml-notebooks" and int(after) > int(before) for t, before, after, _ in what_if), proc.stdout
    for tenant, before, after, rest in what_if:
        assert int(after) >= int(before)
        if "STOPS WAITING" in rest:
            assert int(after) > int(before) and pending[tenant] > 0, (tenant, rest)
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "files", "fragments"),
    [
        (("--add-capacity", "h100=lots"), {}, ("--add-capacity", "FLAVOR=N")),
        (("--capacity", "cap.yaml"), {"cap.yaml": "flavors: {f: {nvidia.com/gpu: -1}}\n"}, ("cap.yaml", ">= 0")),
        (("--policy", "p.yaml"), {"p.yaml": "reserve: {default: lots}\n"}, ("p.yaml", "n+1")),
        (("--policy", "p.yaml"), {"p.yaml": "queues: {a: {weight: 0}}\n"}, ("p.yaml", "weight")),
        (("--policy", "missing.yaml"), {}, ("cannot read", "missing.yaml")),
        (("--add-capacity", "h100=1", "--apply"), {}, ("--add-capacity", "--apply")),
    ],
)
def test_bad_input_is_one_line(demo_store: Path, tmp_path: Path, args: tuple[str, ...], files: dict[str, str],
                               fragments: tuple[str, ...]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    resolved = [str(tmp_path / a) if a in files or a.endswith(".yaml") else a for a in args]
    proc = gpulens("plan", "--db", str(demo_store), *resolved)
    assert_one_line_error(proc, *fragments)


def test_a_missing_store_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(gpulens("plan", "--db", str(tmp_path / "none.duckdb")), "no store at")


@pytest.fixture(scope="module")
def planned_store(demo_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("planned")
    (tmp / "capacity.yaml").write_text("flavors:\n  h100-80gb:\n    nvidia.com/gpu: 32\n")
    (tmp / "policy.yaml").write_text(N_PLUS_1_ON_THE_GROWN_H100S)
    proc = gpulens("plan", "--db", str(demo_store), "--capacity", str(tmp / "capacity.yaml"),
                   "--policy", str(tmp / "policy.yaml"), "--out", str(tmp / "o"))
    assert proc.returncode == 0, proc.stderr
    return demo_store


def test_the_report_has_a_quota_plan_section(planned_store: Path, tmp_path: Path) -> None:
    proc = gpulens("report", "--db", str(planned_store), "--out", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "report" / "index.html").read_text()
    section = html[html.index('id="plan"'):]
    assert "Quota plan" in section and "capacity line (for quotas)" in section
    assert "llm-research" in section and "h100-80gb" in section


def test_the_streamlit_page_shows_current_vs_planned_against_the_capacity_line(
    planned_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from dashboards.streamlit.launch import DB_ENV

    st.cache_data.clear()
    st.cache_resource.clear()
    monkeypatch.setenv(DB_ENV, str(planned_store))
    app = Path(__file__).resolve().parents[1] / "dashboards" / "streamlit" / "app.py"
    at = AppTest.from_file(str(app), default_timeout=60)
    at.run()
    at.switch_page("views/plan.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title] == ["Quota plan"]
    at.selectbox[0].select("h100-80gb nvidia.com/gpu").run()
    with duckdb.connect(str(planned_store), read_only=True) as con:
        reserve, capacity, planned = con.execute(
            "SELECT reserve, capacity, planned_quota FROM quota_plan WHERE flavor = 'h100-80gb' "
            "AND cluster_queue = 'llm-research' ORDER BY generated_at DESC LIMIT 1").fetchone()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Units on the flavor"] == "32" and reserve >= 1 and capacity == 32 - reserve
    assert metrics["Reserve"] == f"{reserve:g}" and metrics["Capacity for quotas"] == f"{capacity:g}"
    assert at.get("vega_lite_chart"), "current vs planned chart missing"
    assert any(f"capacity line of {capacity:g} units" in c.value for c in at.caption)
    rows = at.dataframe[0].value
    assert list(rows["cluster_queue"]) == ["llm-research"] and list(rows["planned_quota"]) == [planned]
    assert planned == 16  # all it asks: 16 in use, nothing pending, room on 32
