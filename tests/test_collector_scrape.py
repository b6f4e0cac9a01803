"""Scraping live /metrics endpoints (real HTTP servers): parallel targets, failures isolated per target."""

from __future__ import annotations

import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import duckdb

from collector.scrape import scrape_loop, scrape_once
from tests.support.http_stub import Responder, http_stand_in
from tests.support.store_render import render_text, series_for
from tests.support.synthetic_fleet import HOSTILE, synthetic_frames

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"
T0 = 1_790_000_000.0


def _static(body: str, status: int = 200) -> Responder:
    return lambda _h: (status, "text/plain; version=0.0.4", body.encode())


def _gpulens_text(hostile: bool = False) -> str:
    frames = synthetic_frames(T0, T0 + 60, 60.0, nodes=1, hostile_tenant=hostile)
    return render_text(series_for(frames, "gpulens"))


def test_every_good_target_is_ingested_when_others_fail(tmp_path: Path) -> None:
    malformed = "gpulens_gpu_up{node=\"n\",gpu=\"G\"} 1\n# TYPE x gauge\nbroken{gpu=\"G\" 1\n"

    def slow(_h: BaseHTTPRequestHandler) -> tuple[int, str, bytes]:
        time.sleep(12)
        return 200, "text/plain", b"up 1\n"

    db = tmp_path / "s.duckdb"
    with (
        http_stand_in(_static(_gpulens_text())) as good,
        http_stand_in(_static((FIXTURES / "h100_whole_gpu.prom").read_text())) as dcgm,
        http_stand_in(_static(malformed)) as bad,
        http_stand_in(_static("oops", status=500)) as err,
        http_stand_in(slow) as hung,
    ):
        urls = [f"{good}/metrics", f"{bad}/metrics", f"{dcgm}/metrics", f"{err}/metrics", f"{hung}/metrics"]
        began = time.monotonic()
        summary = scrape_once(str(db), urls, timeout=1.0, clock=lambda: T0)
        elapsed = time.monotonic() - began
    assert elapsed < 10.0, "a hung target is cut off by its own timeout; it does not hold the cycle"
    by_url = {t.url: t for t in summary.targets}
    assert by_url[urls[0]].error is None and by_url[urls[0]].samples > 0
    assert by_url[urls[2]].error is None and by_url[urls[2]].samples > 0
    assert by_url[urls[1]].error == f"{urls[1]}: line 3: not a valid sample line: 'broken{{gpu=\"G\" 1'"
    assert by_url[urls[3]].error == f"{urls[3]}: HTTP 500"
    assert "timed out" in (by_url[urls[4]].error or "")
    con = duckdb.connect(str(db), read_only=True)
    nodes = {r[0] for r in con.execute("SELECT DISTINCT node FROM device_samples").fetchall()}
    assert nodes == {"gpu-node-0", "gpu-node-7"}
    gaps = sorted(r[0] for r in con.execute("SELECT target FROM gaps").fetchall())
    assert gaps == sorted([urls[1], urls[3], urls[4]])
    assert con.execute("SELECT source, epoch(window_start) FROM ingest_batches").fetchall() == [("scrape", T0)]
    ts = {r[0] for r in con.execute("SELECT DISTINCT epoch(ts) FROM device_samples").fetchall()}
    assert ts == {T0}, "samples without a timestamp get the scrape time"


def test_collect_once_cli_reports_the_bad_target_and_line_and_keeps_the_good(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with (
        http_stand_in(_static(_gpulens_text())) as good,
        http_stand_in(_static("fine 1\nnot valid at all\n")) as bad,
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "gpulens.cli", "collect", "--scrape", f"{good}/metrics", f"{bad}/metrics",
             "--once", "--db", str(db)],
            capture_output=True, text=True, timeout=120, check=False,
        )
    assert proc.returncode == 2, proc.stderr
    assert f"gpulens: error: 1 of 2 targets failed (others ingested): {bad}/metrics: line 2:" in proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM device_samples").fetchall() == [(4,)]


def test_scraping_twice_at_the_same_instant_adds_nothing_and_hostile_labels_survive(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with http_stand_in(_static(_gpulens_text(hostile=True))) as good:
        first = scrape_once(str(db), [f"{good}/metrics"], clock=lambda: T0)
        second = scrape_once(str(db), [f"{good}/metrics"], clock=lambda: T0)
    assert first.rows > 0 and second.rows == 0
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT DISTINCT tenant, namespace FROM allocations").fetchall() == [(HOSTILE, HOSTILE)]


def test_a_scrape_loop_runs_every_interval_for_its_duration(tmp_path: Path) -> None:
    now = [T0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    db = tmp_path / "s.duckdb"
    with http_stand_in(_static(_gpulens_text())) as good:
        summaries = scrape_loop(str(db), [f"{good}/metrics"], interval=15.0, duration=60.0,
                                clock=lambda: now[0], sleep=sleep)
    assert [s.timestamp for s in summaries] == [T0, T0 + 15, T0 + 30, T0 + 45]
    assert slept == [15.0, 15.0, 15.0]
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(DISTINCT ts) FROM device_samples").fetchall() == [(4,)]


def test_collect_says_which_dcgm_exporter_generation_each_target_speaks_and_warns_on_a_mixed_one(
        tmp_path: Path) -> None:
    mixed = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-m",Hostname="n9"} 42\n'
             'DCGM_FI_DEV_BOARD_POWER_WATTS{gpu="0",UUID="GPU-m",Hostname="n9"} 300\n')
    with (
        http_stand_in(_static((FIXTURES / "a100_mixed_pre_4_9.prom").read_text())) as old,
        http_stand_in(_static((FIXTURES / "a100_mixed_4_10.prom").read_text())) as new,
        http_stand_in(_static(mixed)) as both,
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "gpulens.cli", "collect", "--scrape", f"{old}/metrics", f"{new}/metrics",
             f"{both}/metrics", "--once", "--db", str(tmp_path / "g.duckdb")],
            capture_output=True, text=True, timeout=120,
        )
    assert proc.returncode == 0, proc.stderr
    assert f"target {old}/metrics: speaks dcgm-exporter before 4.9" in proc.stderr
    assert f"target {new}/metrics: speaks dcgm-exporter 4.10 or later" in proc.stderr
    assert f"target {both}/metrics: speaks mixed dcgm-exporter generations" in proc.stderr
    warned = [line for line in proc.stderr.splitlines() if line.startswith("gpulens: warning: ")]
    assert len(warned) == 1 and f"{both}/metrics: mixes dcgm-exporter generations" in warned[0]
    con = duckdb.connect(str(tmp_path / "g.duckdb"), read_only=True)
    powers = dict(con.execute("SELECT gpu_uuid, power_watts FROM gpu_samples").fetchall())
    assert powers["GPU-m"] == 300.0 and powers["GPU-5f1c2a90-0000-4000-8000-00000000a100"] == 312.5
