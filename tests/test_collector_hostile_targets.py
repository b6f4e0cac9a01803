"""Scraping hostile or broken targets on loopback: impossible numbers, tricklers, huge bodies, redirects,
a store held by another process. Each case stores the good targets and says what happened to the others."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import duckdb
import pytest

from collector.scrape import scrape_loop, scrape_once
from tests.support.cli import assert_one_line_error, gpulens
from tests.support.http_stub import Responder, http_stand_in
from tests.support.store_lock import store_held
from tests.support.store_render import render_text, series_for
from tests.support.synthetic_fleet import synthetic_frames

T0 = 1_790_000_000.0
MEMORY = "gpulens_device_memory_used_bytes"
ECC = "gpulens_gpu_ecc_errors_total"
ACTIVITY = "gpulens_device_activity_ratio"


def _text(node: int = 0) -> str:
    frames = synthetic_frames(T0, T0 + 60, 60.0, nodes=node + 1)
    text = render_text(series_for(frames, "gpulens"))
    # keep one node per target, so each target's rows are its own
    keep = f'node="gpu-node-{node}"'
    return "\n".join(line for line in text.splitlines() if line.startswith("#") or keep in line) + "\n"


def _with_value(text: str, metric: str, value: str) -> str:
    """``text`` with the first sample of ``metric`` set to ``value`` (as a hostile exporter would send)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(metric + "{"):
            lines[i] = line.rsplit(" ", 1)[0] + " " + value
            return "\n".join(lines) + "\n"
    raise AssertionError(f"no {metric} sample")


def _static(body: str) -> Responder:
    return lambda _h: (200, "text/plain; version=0.0.4", body.encode())


BAD_VALUES = [
    (MEMORY, "-1e300"),
    (ECC, "1e19"),
    (MEMORY, "NaN"),
    (ACTIVITY, "+Inf"),
    (ECC, "-Inf"),
    (MEMORY, "1e309"),
    (ACTIVITY, "7.5"),
]


@pytest.mark.parametrize(("metric", "value"), BAD_VALUES)
def test_one_impossible_number_becomes_null_and_every_target_is_stored(
    tmp_path: Path, metric: str, value: str
) -> None:
    db = tmp_path / "s.duckdb"
    with (
        http_stand_in(_static(_text(0))) as good,
        http_stand_in(_static(_with_value(_text(1), metric, value))) as hostile,
    ):
        summary = scrape_once(str(db), [f"{good}/metrics", f"{hostile}/metrics"], clock=lambda: T0)
    assert summary.errors == []
    assert summary.targets[1].rejected.total == 1
    assert f"{hostile}/metrics: 1 impossible value(s) set to NULL: {metric}" in summary.warnings[0]
    con = duckdb.connect(str(db), read_only=True)
    nodes = {r[0] for r in con.execute("SELECT DISTINCT node FROM device_samples").fetchall()}
    assert nodes == {"gpu-node-0", "gpu-node-1"}
    column = {MEMORY: "memory_used_bytes", ECC: "ecc_corrected_total", ACTIVITY: "activity_ratio"}[metric]
    table = "gpu_samples" if metric == ECC else "device_samples"
    nulls = con.execute(f"SELECT count(*) FROM {table} WHERE node = 'gpu-node-1' AND {column} IS NULL").fetchall()  # noqa: S608
    assert nulls[0][0] >= 1, "the impossible value is stored as NULL (not measured), never as a number"
    values = con.execute(f"SELECT min({column}), max({column}) FROM {table}").fetchall()[0]  # noqa: S608
    assert values[0] >= 0 and values[1] < 9.2e18


def test_the_cli_names_the_target_with_impossible_values_and_stores_everything_else(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with (
        http_stand_in(_static(_text(0))) as good,
        http_stand_in(_static(_with_value(_text(1), MEMORY, "-1e300"))) as hostile,
    ):
        proc = gpulens("collect", "--scrape", f"{good}/metrics", f"{hostile}/metrics", "--once", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"gpulens: warning: {hostile}/metrics: 1 impossible value(s) set to NULL: {MEMORY} below its range x1" \
        in proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(DISTINCT node) FROM device_samples").fetchall() == [(2,)]


def test_a_duration_loop_keeps_going_past_impossible_values(tmp_path: Path) -> None:
    now = [T0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    db = tmp_path / "s.duckdb"
    with (
        http_stand_in(_static(_text(0))) as good,
        http_stand_in(_static(_with_value(_text(1), ECC, "1e19"))) as hostile,
    ):
        summaries = scrape_loop(str(db), [f"{good}/metrics", f"{hostile}/metrics"], interval=15.0, duration=45.0,
                                clock=lambda: now[0], sleep=sleep)
    assert [s.timestamp for s in summaries] == [T0, T0 + 15, T0 + 30]
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(DISTINCT ts) FROM gpu_samples WHERE node = 'gpu-node-1'").fetchall() == [(3,)]


@contextmanager
def _raw_server(handle: object) -> Iterator[str]:
    """A loopback TCP server whose connections ``handle(conn)`` serves by hand (one thread each)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            threading.Thread(target=handle, args=(conn, stop), daemon=True).start()  # type: ignore[arg-type]

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def _trickle(conn: socket.socket, stop: threading.Event) -> None:
    """Answer 200 at once, then one byte of body every 0.5 s for up to 15 s."""
    try:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 30\r\n\r\n")
        for _ in range(30):
            if stop.wait(0.5):
                break
            conn.sendall(b"#")
    except OSError:
        pass
    finally:
        conn.close()


def test_timeout_bounds_the_whole_request_of_a_trickling_target(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with http_stand_in(_static(_text(0))) as good, _raw_server(_trickle) as trickler:
        began = time.monotonic()
        summary = scrape_once(str(db), [f"{good}/metrics", f"{trickler}/metrics"], timeout=2.0, clock=lambda: T0)
        elapsed = time.monotonic() - began
    assert elapsed < 6.0, f"a trickling target held the cycle {elapsed:.1f}s past a 2s timeout"
    assert summary.errors == [f"{trickler}/metrics: timed out: the whole request took over 2s"]
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM device_samples").fetchall()[0][0] > 0
    assert con.execute("SELECT target FROM gaps").fetchall() == [(f"{trickler}/metrics",)]


def _chunked_flood(conn: socket.socket, stop: threading.Event) -> None:
    """A chunked body (no Content-Length) of comment lines, 64 KiB per chunk, up to 8 MiB."""
    try:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"# " + b"x" * (65536 - 3) + b"\n"
        for _ in range(128):
            if stop.is_set():
                break
            conn.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        conn.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    finally:
        conn.close()


def test_a_body_over_the_size_cap_makes_its_target_a_gap(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    big = "# padding\n" * 300_000 + _text(1)  # about 3 MiB, declared in Content-Length
    with (
        http_stand_in(_static(_text(0))) as good,
        http_stand_in(_static(big)) as declared,
        _raw_server(_chunked_flood) as chunked,
    ):
        proc = gpulens("collect", "--scrape", f"{good}/metrics", f"{declared}/metrics", f"{chunked}/metrics",
                       "--once", "--max-body-size", "1MiB", "--db", str(db))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"gpulens: warning: {declared}/metrics: body of 2.86" in proc.stderr
    assert f"gpulens: warning: {chunked}/metrics: body is over the limit of 1 MiB" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("gpulens: error: 2 of 3 targets failed (others ingested)")
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT DISTINCT node FROM device_samples").fetchall() == [("gpu-node-0",)]


def test_a_redirect_is_not_followed_to_another_host(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with http_stand_in(_static(_text(1))) as elsewhere:

        def redirect(handler: BaseHTTPRequestHandler) -> tuple[int, str, bytes]:
            handler.send_response(302)
            handler.send_header("Location", f"{elsewhere}/metrics")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            raise BrokenPipeError  # the stand-in then sends nothing more

        with http_stand_in(_static(_text(0))) as good, http_stand_in(redirect) as redirector:
            summary = scrape_once(str(db), [f"{good}/metrics", f"{redirector}/metrics"], clock=lambda: T0)
    assert summary.errors == [
        f"{redirector}/metrics: HTTP 302 redirect to {elsewhere}/metrics (redirects are not followed)"
    ]
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT DISTINCT node FROM device_samples").fetchall() == [("gpu-node-0",)]


@pytest.mark.parametrize(
    "source",
    [
        ["--simulate", "--days", "0.01"],
        ["--prometheus", "http://127.0.0.1:9", "--start", "now-1h"],
        ["--scrape", "http://127.0.0.1:9/metrics", "--once"],
    ],
)
def test_a_store_held_by_another_process_is_one_line(tmp_path: Path, source: list[str]) -> None:
    db = tmp_path / "s.duckdb"
    with store_held(db):
        proc = gpulens("collect", *source, "--db", str(db))
    assert_one_line_error(proc, f"the store {db} is in use by another process")


def test_the_interval_loop_waits_for_a_busy_store_and_writes_every_scrape(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    said: list[str] = []
    with http_stand_in(_static(_text(0))) as good, store_held(db, seconds=2.5) as holder:
        summaries = scrape_loop(str(db), [f"{good}/metrics"], interval=1.0, duration=3.0, say=said.append)
        assert holder.wait(timeout=10) == 0
    assert len(summaries) == 3, said
    assert any("in use by another process: retrying in" in line for line in said), said
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM ingest_batches WHERE source = 'scrape'").fetchall() == [(3,)]


def test_collect_help_names_the_limits() -> None:
    proc = subprocess.run([sys.executable, "-m", "gpulens.cli", "collect", "--help"], capture_output=True, text=True,
                          timeout=60, check=False, env={**os.environ, "COLUMNS": "250"})
    assert "--max-body-size" in proc.stdout and "Bound of one whole HTTP request" in proc.stdout
