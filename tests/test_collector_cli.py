"""The `gpulens collect` and `gpulens export-parquet` command lines: sources, errors, help."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from gpulens.core.errors import UserError
from gpulens.core.timeparse import parse_duration, parse_time

END = 1_790_000_000.0 - 1_790_000_000.0 % 3600


def _gpulens(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpulens.cli", *args], capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.parametrize(("text", "seconds"), [("15s", 15.0), ("5m", 300.0), ("1.5h", 5400.0), ("14d", 1209600.0),
                                               ("90", 90.0), ("250ms", 0.25), ("1h30m", 5400.0)])
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "-1s", "0s", "1h-30m"])
def test_bad_durations_are_clear_errors(text: str) -> None:
    with pytest.raises(UserError, match="invalid duration|must be positive"):
        parse_duration(text)


def test_times_parse_from_unix_rfc3339_and_relative() -> None:
    assert parse_time("1790000000") == 1_790_000_000.0
    assert parse_time("2026-09-21T14:13:20Z") == 1_790_000_000.0
    assert parse_time("now-1h", clock=lambda: 10_000.0) == 6_400.0
    assert parse_time("now", clock=lambda: 10_000.0) == 10_000.0
    with pytest.raises(UserError, match="invalid --start 'yesterday'"):
        parse_time("yesterday", what="--start")


def test_collect_simulate_then_export_parquet(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    proc = _gpulens("collect", "--simulate", "--days", "0.25", "--step", "300s", "--end", f"{END:.0f}",
                    "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "sim chunk 1/1" in proc.stderr and "simulated backfill: 1 chunks" in proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(DISTINCT ts) FROM device_samples").fetchall() == [(72,)]
    con.close()
    out = tmp_path / "parquet"
    exported = _gpulens("export-parquet", "--db", str(db), "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert (out / "device_samples" / "date=2026-09-21").is_dir()
    assert (out / "devices.parquet").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["collect"], "choose exactly one source"),
        (["collect", "--simulate", "--kubernetes"], "choose exactly one source: --scrape URL..., --prometheus URL, "
                                                    "--kubernetes or --simulate (got --kubernetes --simulate)"),
        (["collect", "--scrape"], "--scrape needs at least one URL"),
        (["collect", "--simulate", "--schema", "prom"], "invalid --schema 'prom'"),
        (["collect", "--simulate", "http://x"], "unexpected argument 'http://x'"),
        (["collect", "--scrape", "http://127.0.0.1:9/metrics", "--once", "--interval", "soon"],
         "invalid --interval 'soon'"),
        (["export-parquet", "--db", "/nonexistent/x.duckdb"], "no store at /nonexistent/x.duckdb"),
        (["collect", "--prometheus", "http://127.0.0.1:9", "--start", "now-5m", "--header", "X-Scope-OrgID"],
         "invalid --header 'X-Scope-OrgID': use NAME=VALUE"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path: Path, args: list[str], message: str) -> None:
    db = ["--db", str(tmp_path / "s.duckdb")] if args[0] == "collect" else []
    proc = _gpulens(*args, *db)
    assert proc.returncode == 2
    assert proc.stderr.startswith("gpulens: error: ") and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_prometheus_unreachable_is_one_clear_line(tmp_path: Path) -> None:
    proc = _gpulens("collect", "--prometheus", "http://127.0.0.1:9", "--start", "now-5m", "--end", "now",
                    "--retries", "0", "--timeout", "1s", "--db", str(tmp_path / "s.duckdb"))
    assert proc.returncode == 2
    assert "gpulens: error: http://127.0.0.1:9/api/v1/query_range: failed after 1 attempts: connection failed" \
        in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_first_collection_without_start_reads_the_last_day(tmp_path: Path) -> None:
    """A CronJob's first run has no watermark and no --start: it starts a day back (and says so) instead of
    failing every hour until someone backfills by hand."""
    proc = _gpulens("collect", "--prometheus", "http://127.0.0.1:9", "--step", "60s", "--retries", "0",
                    "--timeout", "1s", "--db", str(tmp_path / "s.duckdb"))
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("first collection of raw series from http://127.0.0.1:9: from "), proc.stderr
    assert "(a day back; give --start to collect earlier history)" in lines[0]
    assert proc.returncode == 2 and lines[1].startswith("gpulens: error: ") and "connection failed" in lines[1]
    assert "--start is required" not in proc.stderr


def test_collect_help_explains_every_source() -> None:
    proc = _gpulens("collect", "--help")
    assert proc.returncode == 0
    for word in ("--scrape", "--prometheus", "--kubernetes", "--simulate", "--schema", "dcgm", "gap"):
        assert word in proc.stdout
