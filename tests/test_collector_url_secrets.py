"""Credentials in a --scrape / --prometheus URL reach the server only: never a message, never the store.

Real `gpulens collect` runs against real HTTP servers on loopback that fail or answer badly; stderr and
stdout are searched for the password, and so is every column of every table of the store it wrote.
"""

from __future__ import annotations

import logging
import socket
import subprocess
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import duckdb
import pytest

from collector.prometheus import HttpSettings, PrometheusClient
from collector.scrape import scrape_once
from collector.store import Store, to_datetime
from gpulens.core.redact import redact
from tests.support.cli import gpulens
from tests.support.http_stub import Responder, http_stand_in
from tests.support.store_render import render_text, series_for
from tests.support.synthetic_fleet import synthetic_frames

SECRET = "s3cr3t-Pw0rd"
TOKEN = "tok3n-0nly-XYZ"
T0 = 1_790_000_000.0


def _with_credentials(base: str, userinfo: str = f"scraper:{SECRET}") -> str:
    return base.replace("http://", f"http://{userinfo}@", 1)


def _stored_text(db: Path) -> str:
    """Every value of every column of every table of the store, as text."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()]
        parts = []
        for table in tables:
            columns = [r[0] for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' AND table_name = ?",
                [table]).fetchall()]
            casts = ", ".join(f'CAST("{c}" AS VARCHAR)' for c in columns)
            parts.extend(repr(row) for row in con.execute(f'SELECT {casts} FROM "{table}"').fetchall())  # noqa: S608
        return "\n".join(parts)
    finally:
        con.close()


def _assert_nowhere(secret: str, proc: subprocess.CompletedProcess[str], db: Path) -> str:
    """The secret is in neither output stream nor the store; returns the store's text for further checks."""
    assert secret not in proc.stderr, proc.stderr
    assert secret not in proc.stdout, proc.stdout
    stored = _stored_text(db)
    assert secret not in stored
    return stored


def _exposition() -> bytes:
    frames = synthetic_frames(T0, T0 + 60, 60.0, nodes=1)
    return render_text(series_for(frames, "gpulens")).encode()


def _answer(status: int, body: bytes, seen: list[str]) -> Responder:
    def respond(handler: BaseHTTPRequestHandler) -> tuple[int, str, bytes]:
        seen.append(handler.headers.get("Authorization", ""))
        return status, "text/plain; version=0.0.4", body
    return respond


def _redirect_with_credentials(handler: BaseHTTPRequestHandler) -> tuple[int, str, bytes]:
    handler.send_response(302)
    handler.send_header("Location", f"http://other:{SECRET}@127.0.0.1:9/metrics")
    handler.send_header("Content-Length", "0")
    handler.end_headers()
    raise BrokenPipeError  # the stand-in then sends nothing more


BAD_TARGETS: list[tuple[str, Callable[[list[str]], Responder]]] = [
    ("HTTP 500", lambda seen: _answer(500, b"boom", seen)),
    ("not the Prometheus text format", lambda seen: _answer(200, b"gpu_util{node=\"a\" 1\n", seen)),
    ("redirect", lambda seen: _redirect_with_credentials),
]


@pytest.mark.parametrize(("case", "responder"), BAD_TARGETS, ids=[c for c, _ in BAD_TARGETS])
def test_a_failing_scrape_target_is_named_and_stored_without_its_password(
    tmp_path: Path, case: str, responder: Callable[[list[str]], Responder]
) -> None:
    db = tmp_path / "s.duckdb"
    seen: list[str] = []
    with http_stand_in(_answer(200, _exposition(), seen)) as good, http_stand_in(responder(seen)) as bad:
        good_url, bad_url = _with_credentials(f"{good}/metrics"), _with_credentials(f"{bad}/metrics")
        proc = gpulens("collect", "--scrape", "--once", "--db", str(db), good_url, bad_url)
    assert proc.returncode == 2, proc.stderr  # one target failed (the other is ingested)
    stored = _assert_nowhere(SECRET, proc, db)
    shown = f"http://scraper:***@{bad.removeprefix('http://')}/metrics"
    assert shown in proc.stderr
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT target FROM gaps").fetchall() == [(shown,)]
    assert con.execute("SELECT count(*) FROM device_samples").fetchone()[0] > 0  # the good target is stored
    con.close()
    assert "scraper" in stored  # the account stays named; only its password is masked
    assert seen and all(h.startswith("Basic ") for h in seen)  # the servers still got the credentials


def test_a_token_given_as_the_user_part_is_masked_whole(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with http_stand_in(_answer(503, b"", [])) as bad:
        proc = gpulens("collect", "--scrape", "--once", "--db", str(db), _with_credentials(f"{bad}/metrics", TOKEN))
    _assert_nowhere(TOKEN, proc, db)
    assert f"http://***@{bad.removeprefix('http://')}/metrics: HTTP 503" in proc.stderr


def _query_api(status: int, body: bytes) -> Responder:
    return lambda _h: (status, "application/json", body)


EMPTY_MATRIX = b'{"status":"success","data":{"resultType":"matrix","result":[]}}'


@pytest.mark.parametrize(("status", "body"), [
    (503, b"unavailable"),
    (400, b'{"status":"error","errorType":"bad_data","error":"parse error"}'),
    (200, b"<html>not json</html>"),
    (200, EMPTY_MATRIX),  # answers, but without samples: every step becomes a gap naming the server
])
def test_a_query_api_that_fails_or_answers_badly_never_sees_its_password_echoed_or_stored(
    tmp_path: Path, status: int, body: bytes
) -> None:
    db = tmp_path / "s.duckdb"
    with http_stand_in(_query_api(status, body)) as api:
        url = _with_credentials(api)
        proc = gpulens("collect", "--prometheus", url, "--start", "now-20m", "--end", "now-10m", "--step", "60s",
                       "--retries", "0", "--db", str(db))
    stored = _assert_nowhere(SECRET, proc, db)
    shown = redact(url)
    assert shown == f"http://scraper:***@{api.removeprefix('http://')}"
    if body == EMPTY_MATRIX:
        assert proc.returncode == 0, proc.stderr
        assert f"prometheus:{shown}" in stored  # the window log's source
        con = duckdb.connect(str(db), read_only=True)
        assert {r[0] for r in con.execute("SELECT target FROM gaps").fetchall()} == {shown}
        con.close()
    else:
        assert proc.returncode == 2 and proc.stderr.startswith(f"gpulens: error: {shown}"), proc.stderr


def test_an_unreachable_query_api_is_named_without_its_password(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    db = tmp_path / "s.duckdb"
    proc = gpulens("collect", "--prometheus", f"http://scraper:{SECRET}@127.0.0.1:{port}", "--start", "now-20m",
                   "--end", "now-10m", "--retries", "0", "--db", str(db))
    _assert_nowhere(SECRET, proc, db)
    assert f"http://scraper:***@127.0.0.1:{port}/api/v1/query_range: failed after 1 attempts: connection failed" \
        in proc.stderr


def test_a_url_that_is_not_http_is_refused_without_echoing_its_password() -> None:
    proc = gpulens("collect", "--prometheus", f"ftp://scraper:{SECRET}@127.0.0.1/", "--db", "unused.duckdb")
    assert proc.returncode == 2
    assert SECRET not in proc.stderr and "ftp://scraper:***@127.0.0.1/" in proc.stderr


@pytest.mark.parametrize(("text", "shown"), [
    ("https://user:pa:ss@host:9090/x?q=1", "https://user:***@host:9090/x?q=1"),
    ("https://user:p@ss@host/", "https://user:***@host/"),  # an unencoded @ in the password
    ("https://token@host/", "https://***@host/"),
    ("GET http://a:b@h1/ then http://c:d@h2/: refused", "GET http://a:***@h1/ then http://c:***@h2/: refused"),
    ("http://host/path?mail=a@b", "http://host/path?mail=a@b"),  # an @ after the path is no credential
    ("http://host:9090/metrics", "http://host:9090/metrics"),
])
def test_redact_masks_the_password_of_every_url_in_a_text(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_the_http_librarys_request_log_names_the_target_without_its_password(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """httpx logs every request's full URL at INFO: a program that shows INFO logs must not show the password."""
    caplog.set_level(logging.INFO)
    with http_stand_in(_answer(500, b"", [])) as scrape_target, http_stand_in(_query_api(200, EMPTY_MATRIX)) as api:
        scrape_once(str(tmp_path / "s.duckdb"), [_with_credentials(f"{scrape_target}/metrics")], clock=lambda: T0)
        with PrometheusClient(HttpSettings(_with_credentials(api), retries=0)) as client:
            client.query_range("up", T0, T0 + 60, 60)
    requests = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert len(requests) == 2 and all("scraper:***@127.0.0.1" in line for line in requests), requests
    assert SECRET not in caplog.text


def test_a_store_written_before_redaction_has_its_stored_passwords_masked_when_next_opened(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    Store(str(db)).close()
    old_base, new_base = f"http://scraper:{SECRET}@prom:9090", "http://scraper:***@prom:9090"
    con = duckdb.connect(str(db))
    con.execute("DELETE FROM schema_info WHERE key = 'url_credentials_redacted'")  # as an older version left it
    con.execute("INSERT INTO gaps VALUES ('scrape', ?, ?, ?, 'HTTP 500'), (?, ?, ?, ?, 'no device samples')",
                [f"http://scraper:{SECRET}@node:9400/metrics", to_datetime(T0), to_datetime(T0 + 15),
                 f"prometheus:{old_base}", old_base, to_datetime(T0), to_datetime(T0 + 60)])
    con.execute("INSERT INTO ingest_batches VALUES (?, ?, ?, 0, ?), (?, ?, ?, 0, ?)",
                [f"prometheus:{old_base}", to_datetime(T0), to_datetime(T0 + 60), to_datetime(T0),
                 f"prometheus:{new_base}", to_datetime(T0), to_datetime(T0 + 60), to_datetime(T0)])  # both spellings
    con.execute("INSERT INTO watermarks VALUES (?, ?, ?), (?, ?, ?)",
                [f"prometheus:{old_base}", to_datetime(T0 + 600), to_datetime(T0),
                 f"prometheus:{new_base}", to_datetime(T0 + 60), to_datetime(T0)])
    con.close()
    with Store(str(db)) as store:
        assert store.watermark(f"prometheus:{new_base}") == T0 + 600  # the later mark survives
        assert store.window_done(f"prometheus:{new_base}", T0, T0 + 60)
    stored = _stored_text(db)
    assert SECRET not in stored
    con = duckdb.connect(str(db), read_only=True)
    assert sorted(con.execute("SELECT source, target FROM gaps").fetchall()) == [
        (f"prometheus:{new_base}", new_base), ("scrape", "http://scraper:***@node:9400/metrics")]
    assert con.execute("SELECT count(*) FROM ingest_batches").fetchone() == (1,)
    con.close()
