"""Fault injection end to end: simulated history -> analyze -> remediate dry-run YAML with taints and evidence."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
import yaml

from tests.support.cli import assert_one_line_error, gpulens
from tests.support.failing_fleet import DEGRADING, FAILED, LOOKALIKE, FailingStore


@pytest.fixture(scope="module")
def store(failing_store: FailingStore,
          tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[tuple[str, int], str]]:
    """A copy of the session's analyzed fault fleet (remediate records its decisions) and its GPU UUIDs by
    (node, index)."""
    fleet = failing_store.fleet
    uuids = {(n, g.index): g.uuid for n in fleet.node_names() for g in fleet.node_plan(n).gpus}
    path = tmp_path_factory.mktemp("remediate-e2e") / "gpulens.duckdb"
    shutil.copyfile(failing_store.path, path)
    return path, uuids


def health_rows(path: Path) -> dict[str, tuple[object, ...]]:
    with duckdb.connect(str(path), read_only=True) as con:
        rows = con.execute(
            "SELECT gpu_uuid, state, drain_candidate, evidence, trend_start_ts, warning_ts, failure_ts, lead_seconds "
            "FROM health WHERE scope = 'gpu'"
        ).fetchall()
    return {r[0]: r[1:] for r in rows}


def test_the_failing_gpu_was_warned_hours_before_it_failed_and_the_degrading_one_is_watched(store) -> None:  # type: ignore[no-untyped-def]
    path, uuids = store
    rows = health_rows(path)
    state, candidate, evidence, trend_start, warned, failed, lead = rows[uuids[FAILED]]
    assert state == "drain" and candidate
    assert trend_start is not None and warned is not None and failed is not None
    assert lead is not None and lead >= 3600, "the warning came at least an hour before the XID 48"
    assert any(e["signal"] == "trend_ecc_corrected_per_hour" and e["since"] for e in json.loads(evidence))
    state, candidate, evidence, *_ = rows[uuids[DEGRADING]]
    assert (state, candidate) == ("watch", True)
    assert any("PCIe replays rising since" in e["reason"] for e in json.loads(evidence))
    state, candidate, *_ = rows[uuids[LOOKALIKE]]
    assert not candidate, "a 40-minute CRC burst on a healthy GPU is not a trend"
    assert sum(1 for r in rows.values() if r[1]) == 2


def test_remediate_writes_dry_run_taints_with_the_evidence_for_exactly_the_drain_candidates(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, _ = store
    proc = gpulens("remediate", "--db", str(path), "--out", str(tmp_path / "taints"))
    assert proc.returncode == 0, proc.stderr
    assert "dry run: nothing applied" in proc.stdout
    files = sorted(p.name for p in (tmp_path / "taints").iterdir())
    assert files == [f"node-{DEGRADING[0]}.yaml", f"node-{FAILED[0]}.yaml"]
    text = (tmp_path / "taints" / f"node-{FAILED[0]}.yaml").read_text()
    assert "# evidence:" in text and "XID 48" in text
    assert "never apply a Node body with only this taint" in text
    body = yaml.safe_load(text)
    assert (body["node"], body["action"], body["scope"]) == (FAILED[0], "taint", "node")
    assert body["taint"] == {"key": "gpulens.io/gpu-unhealthy", "value": "ecc-double-bit", "effect": "NoSchedule"}
    notes = body["annotations"]
    assert "rising since" in notes["gpulens.io/gpu-unhealthy-evidence"]
    assert notes["gpulens.io/gpu-unhealthy-window"].count("Z") == 2
    assert body["commands"][0] == (f"kubectl taint node {FAILED[0]} gpulens.io/gpu-unhealthy=ecc-double-bit:NoSchedule "
                                   "--overwrite"), "kubectl taint rewrites the whole list, keeping other taints"
    assert "dry run: no cluster read; cordoned, NotReady" in proc.stdout, "the dry run says what it cannot know"
    assert "DRA devices are unknown" in proc.stdout


def test_a_count_cap_of_zero_refuses_and_says_why(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, _ = store
    proc = gpulens("remediate", "--db", str(path), "--out", str(tmp_path / "t"), "--max-nodes", "0")
    assert proc.returncode == 0, proc.stderr
    refused = [line for line in proc.stdout.splitlines() if line.strip().startswith("refuse")]
    assert len(refused) == 2 and all("at most 0 (" in line and "--max-nodes 0" in line for line in refused)
    assert not list((tmp_path / "t").iterdir())


def test_bad_input_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(gpulens("remediate", "--db", str(tmp_path / "none.duckdb")), "--db", "no such store")
    (tmp_path / "s.duckdb").touch()
    assert_one_line_error(gpulens("remediate", "--db", str(tmp_path / "none.duckdb"), "--max-share", "150"), "--max-share")


@pytest.mark.parametrize(("flag", "value"), [
    ("--healthy-hours", "nan"), ("--healthy-hours", "inf"), ("--healthy-hours", "-1"), ("--max-share", "nan"),
    ("--max-share", "-inf"), ("--max-nodes", "-1"), ("--breaker-share", "nan"), ("--breaker-share", "0"),
    ("--breaker-share", "101"), ("--breaker-window", "nan"), ("--breaker-window", "0"), ("--scope", "rack"),
    ("--request-timeout", "inf"), ("--healthy-hours", "1e300"), ("--breaker-window", "100000d"),
])
def test_every_number_flag_rejects_non_finite_and_out_of_range_values_by_name(tmp_path: Path, flag: str,
                                                                              value: str) -> None:
    assert_one_line_error(gpulens("remediate", "--db", str(tmp_path / "none.duckdb"), flag, value), flag)


def test_an_out_that_is_a_file_is_refused_before_anything_is_read(store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, _ = store
    (tmp_path / "taken").write_text("x")
    assert_one_line_error(gpulens("remediate", "--db", str(path), "--out", str(tmp_path / "taken")),
                          "--out", "not a directory")
