"""`gpulens analyze` end to end as a user runs it, and tenant-controlled strings that look like SQL."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from tests.support.analytics_fleet import T0, Fleet

EVIL = "x'); DROP TABLE devices; --\"\\ ;SELECT 1"
EVIL_NS = "ns\"'; DELETE FROM idle_capacity; --"


def gpulens(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpulens.cli", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n1")
    f.gpu("GPU-A", "n1", mode="time-slicing", replicas=2)
    f.samples("GPU-A", count=60, activity=0.01)
    f.alloc("GPU-A", EVIL, count=60, ge=0.5, namespace=EVIL_NS, pod="a")
    f.alloc("GPU-A", "plain", count=60, ge=0.5, pod="b")
    f.namespace(EVIL_NS, EVIL, policies=0)
    f.pending(EVIL, "gpu", T0)
    f.close()
    return path


def test_a_tenant_name_holding_sql_flows_through_unchanged(store: Path, tmp_path: Path) -> None:
    summary = analyze(
        store,
        AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=T0 + timedelta(hours=1), out_dir=tmp_path / "o"),
    )
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT count(*) FROM devices").fetchone() == (1,)
    idle = con.execute(
        "SELECT DISTINCT tenant FROM idle_capacity WHERE run_id = ? AND tenant IS NOT NULL ORDER BY 1", [summary.run_id]
    ).fetchall()
    accounts = con.execute(
        """SELECT DISTINCT "SubAccountId" FROM chargeback WHERE run_id = ? ORDER BY 1""", [summary.run_id]
    ).fetchall()
    risk = con.execute(
        "SELECT terms FROM isolation_risk WHERE run_id = ? AND tenant = ?", [summary.run_id, EVIL]
    ).fetchone()
    con.close()
    assert idle == sorted([(EVIL,), ("plain",)])
    assert (EVIL,) in accounts
    assert risk is not None and EVIL_NS.replace('"', '\\"') in risk[0]
    assert summary.idle_by_tenant[0].tenant in (EVIL, "plain")
    assert EVIL in summary.render()


def test_the_command_prints_the_headline_numbers_and_writes_focus_files(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "focus"
    result = gpulens(
        "analyze", "--db", str(store), "--window", "1h", "--bucket", "30m", "--end", "2026-01-05T01:00:00Z",
        "--unallocated", "even", "--out", str(out),
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for phrase in ("allocated-idle", "stranded capacity", "highest isolation risk", "drain candidates", "reconciled"):
        assert phrase in text
    assert "NOT RECONCILED" not in text
    assert (out / "chargeback_focus.csv").is_file() and (out / "chargeback_focus.parquet").is_file()


def test_a_memory_limit_changes_neither_the_run_nor_its_rows(store: Path) -> None:
    base = AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=T0 + timedelta(hours=1))
    first = analyze(store, base)
    con = duckdb.connect(str(store), read_only=True)
    rows = con.execute("SELECT * FROM idle_capacity ORDER BY ALL").fetchall()
    con.close()
    again = gpulens("analyze", "--db", str(store), "--window", "1h", "--bucket", "30m", "--end", "2026-01-05T01:00:00Z",
                    "--memory-limit", "256MB")
    assert again.returncode == 0, again.stderr
    con = duckdb.connect(str(store), read_only=True)
    assert con.execute("SELECT DISTINCT run_id FROM analysis_runs").fetchall() == [(first.run_id,)]
    assert con.execute("SELECT * FROM idle_capacity ORDER BY ALL").fetchall() == rows
    con.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bucket", "7m"], "does not divide a day"),
        (["--window", "two weeks"], "not a duration"),
        (["--mig-proration", "power"], "--mig-proration"),
        (["--end", "yesterday"], "--end: not a time"),
        (["--activity-threshold", "1.5"], "--activity-threshold: must be at most 1"),
        (["--memory-limit", "lots"], "--memory-limit: 'lots' is not a size"),
    ],
)
def test_bad_input_is_one_clear_line(store: Path, args: list[str], message: str) -> None:
    result = gpulens("analyze", "--db", str(store), *args)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("gpulens: error:")
    assert message in result.stderr


def test_a_missing_store_is_named(tmp_path: Path) -> None:
    result = gpulens("analyze", "--db", str(tmp_path / "nope.duckdb"))
    assert result.returncode == 2
    assert "nope.duckdb" in result.stderr and "no store at" in result.stderr


def test_help_explains_the_options() -> None:
    result = gpulens("analyze", "--help")
    assert result.returncode == 0
    for option in ("--window", "--bucket", "--activity-threshold", "--mig-proration", "--unallocated", "--parquet"):
        assert option in result.stdout
