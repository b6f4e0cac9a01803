"""`gpulens remediate --apply` from the command line: local paths checked first, every outcome reaches the end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.cli import assert_one_line_error, gpulens
from tests.support.failing_fleet import DEGRADING, FAILED, FailingStore
from tests.test_remediation_writer import cluster, node_path


@pytest.fixture(scope="module")
def store(failing_store: FailingStore, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A copy of the session's analyzed fault fleet (remediate records its runs in it) and its node names."""
    path = failing_store.copy_store(tmp_path_factory.mktemp("cli"))
    return path, failing_store.fleet.node_names()


def remediate(fake: FakeKubernetesApi, db: Path, tmp: Path, *args: str) -> Any:
    return gpulens("remediate", "--db", str(db), "--apply", "--kubeconfig", str(fake.kubeconfig(tmp)), *args)


def test_an_out_that_cannot_be_written_is_refused_before_the_first_request(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    (tmp_path / "taken").write_text("a file, not a directory")
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        proc = remediate(fake, db, tmp_path, "--out", str(tmp_path / "taken"))
        sent = list(fake.requests)
        taints = fake.objects[node_path(FAILED[0])]["spec"]["taints"]
    assert_one_line_error(proc, "--out", "not a directory")
    assert sent == [], "no Node is changed when the record of the change cannot be written"
    assert all(t["key"] != "gpulens.io/gpu-unhealthy" for t in taints)


def test_an_applied_taint_reaches_the_node_line_the_closing_line_and_the_files(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        proc = remediate(fake, db, tmp_path, "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.strip().startswith(f"taint    {FAILED[0]}") and "-> applied: tainted" in line for line in lines)
    assert "outcome: 2 applied" in proc.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f"node-{DEGRADING[0]}.yaml", f"node-{FAILED[0]}.yaml"]


def test_a_write_without_an_answer_is_reported_as_may_have_been_applied_and_exits_non_zero(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        fake.hang("PATCH", node_path(FAILED[0]), 5.0)
        proc = remediate(fake, db, tmp_path, "--out", str(tmp_path / "out"), "--request-timeout", "1s")
    node_line = next(line for line in proc.stdout.splitlines() if line.strip().startswith(f"taint    {FAILED[0]}"))
    assert "-> unknown: may have been applied" in node_line
    assert "1 applied" in proc.stdout and "1 unknown" in proc.stdout
    assert proc.returncode == 2
    (error,) = proc.stderr.strip().splitlines()
    assert error.startswith("gpulens: error: 1 of 2 node(s) not known to be changed (unknown)")


def newest_rows(db: Path) -> dict[str, dict[str, Any]]:
    """The rows of the latest `gpulens remediate` run recorded in the store, by node."""
    with duckdb.connect(str(db), read_only=True) as con:
        cur = con.execute("SELECT * FROM remediation_outcomes WHERE decided_at = "
                          "(SELECT max(decided_at) FROM remediation_outcomes)")
        names = [d[0] for d in cur.description]
        return {row["node"]: row for row in (dict(zip(names, r, strict=True)) for r in cur.fetchall())}


def test_every_applied_outcome_is_recorded_in_the_store_with_its_run_window_and_guard_rails(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        fake.hang("PATCH", node_path(FAILED[0]), 5.0)
        proc = remediate(fake, db, tmp_path, "--out", str(tmp_path / "out"), "--request-timeout", "1s")
    assert proc.returncode == 2
    rows = newest_rows(db)
    failed, degrading = rows[FAILED[0]], rows[DEGRADING[0]]
    assert (failed["mode"], failed["action"], failed["outcome"]) == ("apply", "taint", "unknown")
    assert "may have been applied" in failed["outcome_message"]
    assert (degrading["action"], degrading["outcome"]) == ("taint", "applied")
    assert failed["run_id"] and failed["window_start"] < failed["window_end"] and failed["evidence"]
    assert json.loads(failed["parameters"])["max_share"] == 0.1


def test_a_dry_run_records_its_decisions_without_outcomes(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db, _ = store
    proc = gpulens("remediate", "--db", str(db), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    rows = newest_rows(db)
    assert rows[FAILED[0]]["mode"] == "dry-run" and rows[FAILED[0]]["action"] == "taint"
    assert all(r["outcome"] is None and r["outcome_message"] is None for r in rows.values())
