"""`gpulens plan --apply` on a fleet of two flavors: cuts go first, a flavor whose cut did not land is not raised,
and every outcome (failed, may have been applied) reaches the lines, the closing line and the exit code."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.cli import assert_one_line_error, gpulens
from tests.support.order_fleet import (
    GPU,
    H100,
    H200,
    NOW,
    build_order_fleet,
    live_queue,
    put_live_queues,
    written,
)
from tests.support.recommend_cluster import CQ_V1BETA2

CAPACITY = {H100: 46, H200: 27}
"""Now h100 is full (46 of 46) and h200 holds 24 of 27. The plan writes h100 18 + 20 + 6 = 44 and h200
6 + 20 = 26; without research's cut h100 would be 24 + 20 + 6 = 50."""


def capacity_file(tmp_path: Path) -> Path:
    path = tmp_path / "capacity.yaml"
    path.write_text("flavors:\n" + "".join(f"  {f}: {{{GPU}: {n}}}\n" for f, n in CAPACITY.items()))
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_order_fleet(tmp_path_factory.mktemp("order") / "store.duckdb")


@pytest.fixture
def fake() -> Iterator[FakeKubernetesApi]:
    with FakeKubernetesApi() as api:
        put_live_queues(api)
        yield api


def plan_apply(store: Path, fake: FakeKubernetesApi, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return gpulens("plan", "--db", str(store), "--capacity", str(capacity_file(tmp_path)), "--out", str(tmp_path / "o"),
                   "--no-store", "--apply", "--kubeconfig", str(fake.kubeconfig(tmp_path)), *extra)


def totals_after_each_write(fake: FakeKubernetesApi, landed: set[int] | None = None) -> list[dict[str, int]]:
    """Each flavor's sum of nominal quotas after each PATCH that landed (all of them unless ``landed`` says)."""
    live = {name: dict(quotas) for name, quotas in NOW.items()}
    sums = []
    for i, (queue, quotas) in enumerate(written(fake)):
        if landed is None or i in landed:
            live[queue].update(quotas)
        sums.append({f: sum(q.get(f, 0) for q in live.values()) for f in CAPACITY})
    return sums


def test_every_cut_is_sent_before_any_raise_so_no_flavor_is_over_capacity_even_between_writes(
    store: Path, fake: FakeKubernetesApi, tmp_path: Path
) -> None:
    proc = plan_apply(store, fake, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sent = written(fake)
    assert sent == [  # inference (a cut on h200 and a raise on h100) is written twice: its cut with the cuts
        ("inference", {H100: 16, H200: 6}), ("research", {H100: 18}),
        ("inference", {H100: 20, H200: 6}), ("training", {H200: 20}),
    ]
    for sums in totals_after_each_write(fake):
        assert all(sums[f] <= CAPACITY[f] for f in CAPACITY), sums
    assert "ClusterQueue inference: APPLIED: h200-141gb/nvidia.com/gpu 8 -> 6; h100-80gb/nvidia.com/gpu 16 -> 20" \
        in proc.stdout
    assert "apply: 3 applied, 0 unchanged, 0 skipped, 0 refused, 0 failed, 0 unknown" in proc.stdout
    assert "live totals" not in proc.stdout  # nothing partial: nothing to read back


def test_a_cut_that_fails_with_500_refuses_the_raises_of_its_flavor_and_says_where_each_flavor_stands(
    store: Path, fake: FakeKubernetesApi, tmp_path: Path
) -> None:
    fake.fail("PATCH", f"{CQ_V1BETA2}/research", 500, "etcdserver: request timed out")
    proc = plan_apply(store, fake, tmp_path)
    live = {n: fake.objects[f"{CQ_V1BETA2}/{n}"]["spec"]["resourceGroups"][0]["flavors"] for n in NOW}
    h100 = sum(r["nominalQuota"] for fl in live.values() for f in fl if f["name"] == H100 for r in f["resources"]
               if r["name"] == GPU)
    assert h100 == 46  # 24 + 16 + 6: not 50
    assert ("inference", {H100: 20, H200: 6}) not in written(fake)
    assert ("training", {H200: 20}) in written(fake)  # its flavor's cut landed
    assert_one_line_error(proc, "1 of 3 object(s) failed", "ClusterQueue research", "HTTP 500")
    lines = proc.stdout.splitlines()
    assert any(line.startswith("ClusterQueue research: FAILED: PATCH ") for line in lines), proc.stdout
    assert ("ClusterQueue inference: APPLIED: h200-141gb/nvidia.com/gpu 8 -> 6; h100-80gb/nvidia.com/gpu: raise "
            "refused: the cut of ClusterQueue research (failed) in this flavor did not land") in proc.stdout
    assert "ClusterQueue training: APPLIED: h200-141gb/nvidia.com/gpu 16 -> 20" in proc.stdout
    assert "  h100-80gb/nvidia.com/gpu: live total 46 over 3 object(s), of capacity 46" in lines
    assert "  h200-141gb/nvidia.com/gpu: live total 26 over 2 object(s), of capacity 27" in lines
    assert "apply: 2 applied, 0 unchanged, 0 skipped, 0 refused, 1 failed, 0 unknown" in lines


def test_a_cut_without_an_answer_may_have_been_applied_its_flavor_is_not_raised_and_the_exit_is_non_zero(
    store: Path, fake: FakeKubernetesApi, tmp_path: Path
) -> None:
    fake.hang("PATCH", f"{CQ_V1BETA2}/research", 6.0)  # the answer never comes in time; the write lands later
    proc = plan_apply(store, fake, tmp_path, "--request-timeout", "1s")
    assert_one_line_error(proc, "1 of 3 object(s) may have been applied", "ClusterQueue research",
                          "no answer within 1 s")
    research = next(line for line in proc.stdout.splitlines() if line.startswith("ClusterQueue research: "))
    assert research.startswith("ClusterQueue research: UNKNOWN: PATCH ")
    assert "read back: h100-80gb/nvidia.com/gpu 24, not the new value(s) yet, but the request may still land" \
        in research
    assert "h100-80gb/nvidia.com/gpu: raise refused: the cut of ClusterQueue research (may have been applied)" in proc.stdout
    assert ("inference", {H100: 20, H200: 6}) not in written(fake)
    for sums in totals_after_each_write(fake):  # even if the hung cut lands at any moment
        assert all(sums[f] <= CAPACITY[f] for f in CAPACITY), sums
    assert "apply: 2 applied, 0 unchanged, 0 skipped, 0 refused, 0 failed, 1 unknown" in proc.stdout


def test_a_cut_whose_answer_was_lost_after_it_landed_is_read_back_as_applied_and_the_raise_goes(
    store: Path, fake: FakeKubernetesApi, tmp_path: Path
) -> None:
    fake.hang("PATCH", f"{CQ_V1BETA2}/research", 6.0, land_first=True)
    proc = plan_apply(store, fake, tmp_path, "--request-timeout", "1s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("ClusterQueue research: APPLIED: h100-80gb/nvidia.com/gpu 24 -> 18 (the answer was lost: no answer "
            "within 1 s; read back: applied)") in proc.stdout
    assert ("inference", {H100: 20, H200: 6}) in written(fake)
    assert "apply: 3 applied, 0 unchanged, 0 skipped, 0 refused, 0 failed, 0 unknown" in proc.stdout


def test_a_cut_refused_for_work_pending_in_the_live_queue_holds_the_raises_of_its_flavor(
    store: Path, fake: FakeKubernetesApi, tmp_path: Path
) -> None:
    research = live_queue("research", NOW["research"])
    research["status"]["pendingWorkloads"] = 2
    fake.put(f"{CQ_V1BETA2}/research", research)
    proc = plan_apply(store, fake, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # refusals are guard rails, not failures
    assert "ClusterQueue research: REFUSED: h100-80gb/nvidia.com/gpu: cut refused, 2 workload(s) pending" \
        in proc.stdout
    assert "raise refused: the cut of ClusterQueue research (refused)" in proc.stdout
    assert "  h100-80gb/nvidia.com/gpu: live total 46 over 3 object(s), of capacity 46" in proc.stdout.splitlines()


@pytest.mark.parametrize("command", ["plan", "recommend"])
@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_an_out_that_cannot_be_a_folder_is_one_line_before_any_request_or_store_write(
    store: Path, fake: FakeKubernetesApi, tmp_path: Path, command: str, where: str
) -> None:
    blocker = tmp_path / "plan.txt"
    blocker.write_text("not a folder\n")
    out = blocker if where == "a file" else blocker / "out"
    db = tmp_path / "copy.duckdb"
    db.write_bytes(store.read_bytes())
    proc = gpulens(command, "--db", str(db), "--out", str(out), "--apply",
                   "--kubeconfig", str(fake.kubeconfig(tmp_path)))
    assert fake.requests == []
    with duckdb.connect(str(db), read_only=True) as con:
        tables = {r[0] for r in con.execute("SHOW TABLES").fetchall()}
    assert not {"quota_plan", "recommendations"} & tables  # checked before the store is written, too
    assert_one_line_error(proc, f"invalid --out {out}", "not a folder")


def test_an_out_folder_nobody_can_write_in_is_one_line_before_any_request(
    store: Path, fake: FakeKubernetesApi, tmp_path: Path
) -> None:
    out = Path("/proc/gpulens-plan")  # no file can be made in /proc, not even by root
    proc = gpulens("plan", "--db", str(store), "--out", str(out), "--no-store", "--apply",
                   "--kubeconfig", str(fake.kubeconfig(tmp_path)))
    assert_one_line_error(proc, f"invalid --out {out}", "cannot write in /proc")
    assert fake.requests == []


@pytest.mark.parametrize(
    ("policy", "fragments"),
    [
        ("tenants: {research: {monthly_budget_usd: 1e308}}\n",
         ("invalid --policy", "policy.yaml", "tenants.research.monthly_budget_usd: must be at most 1e+12")),
        ("tenants: {research: {monthly_budget_usd: .nan}}\n",
         ("tenants.research.monthly_budget_usd: must be a finite number",)),
        ("borrowing_limit_ratio: .inf\n", ("borrowing_limit_ratio: must be a finite number (got inf)",)),
        ("queues: {research: {guarantee: 100000000000}}\n", ("queues.research.guarantee", "10,000,000")),
        ("window_days: 1e9\n", ("window_days: must be at most 3650",)),
    ],
)
def test_a_policy_value_out_of_bounds_is_one_line_naming_the_file_and_the_key(
    store: Path, tmp_path: Path, policy: str, fragments: tuple[str, ...]
) -> None:
    (tmp_path / "policy.yaml").write_text(policy)
    proc = gpulens("plan", "--db", str(store), "--policy", str(tmp_path / "policy.yaml"), "--no-store",
                   "--out", str(tmp_path / "o"))
    assert_one_line_error(proc, *fragments)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--borrowing-limit-ratio", "inf"), "--borrowing-limit-ratio: must be a finite number (got inf)"),
        (("--borrowing-limit-ratio", "nan"), "--borrowing-limit-ratio: must be a finite number (got nan)"),
        (("--borrowing-limit-ratio", "1e308"), "--borrowing-limit-ratio: must be at most 1000"),
        (("--lending-limit-ratio=-inf",), "--lending-limit-ratio: must be a finite number"),
        (("--headroom", "inf"), "--headroom: must be a finite number"),
    ],
)
def test_a_recommend_number_that_is_not_finite_or_in_range_is_one_line_by_flag(
    store: Path, tmp_path: Path, args: tuple[str, ...], fragment: str
) -> None:
    proc = gpulens("recommend", "--db", str(store), "--no-store", "--out", str(tmp_path / "o"), *args)
    assert_one_line_error(proc, fragment)


def test_add_capacity_beyond_any_fleet_is_one_line(store: Path, tmp_path: Path) -> None:
    proc = gpulens("plan", "--db", str(store), "--add-capacity", f"{H100}={10**30}", "--no-store")
    assert_one_line_error(proc, "--add-capacity", "at most 10,000,000 units")


@pytest.mark.parametrize(("broken", "recorded"), [("a 500", "failed"), ("no answer", "unknown")])
def test_every_queue_outcome_is_recorded_with_the_plan_in_the_store(
    store: Path, fake: FakeKubernetesApi, tmp_path: Path, broken: str, recorded: str
) -> None:
    db = tmp_path / "copy.duckdb"
    db.write_bytes(store.read_bytes())
    if broken == "a 500":
        fake.fail("PATCH", f"{CQ_V1BETA2}/research", 500, "etcdserver: request timed out")
    else:
        fake.hang("PATCH", f"{CQ_V1BETA2}/research", 6.0)
    proc = gpulens("plan", "--db", str(db), "--capacity", str(capacity_file(tmp_path)), "--out", str(tmp_path / "o"), "--apply",
                   "--request-timeout", "1s", "--kubeconfig", str(fake.kubeconfig(tmp_path)))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT cluster_queue, flavor, apply_outcome, apply_message FROM quota_plan "
                           "ORDER BY 1, 2").fetchall()
    outcome = {(q, f): (o, m) for q, f, o, m in rows}
    assert outcome[("research", H100)][0] == recorded
    assert outcome[("inference", H100)][0] == outcome[("inference", H200)][0] == "applied"
    assert "raise refused" in outcome[("inference", H100)][1]
    assert outcome[("training", H200)][0] == "applied"
    assert outcome[("batch", H100)] == (None, None)  # nothing to change: nothing applied
