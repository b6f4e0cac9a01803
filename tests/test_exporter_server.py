"""The exporter's HTTP server over real sockets: /metrics, /healthz, concurrency, TLS and basic auth."""

from __future__ import annotations

import base64
import gzip
import hashlib
import http.client
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from exporter.auth import load_basic_auth_file
from exporter.server import ExporterHandle, build_server, serve_in_thread
from exporter.settings import ExporterSettings
from gpulens.core.errors import UserError
from tests.support.exporter import SlowCollector, fake_cycle, http_get
from tests.support.fakes import (
    NODE,
    FakeAllocationSource,
    FakeClock,
    FakeDeviceSource,
    every_family_allocations,
    every_family_readings,
)
from tests.support.prometheus import require_binary


def start(settings: ExporterSettings, clock: FakeClock | None = None, background: bool = False
          ) -> tuple[ExporterHandle, FakeDeviceSource]:
    devices = FakeDeviceSource(every_family_readings())
    handle = serve_in_thread(settings, device_source=devices,
                             allocation_source=FakeAllocationSource(every_family_allocations()),
                             node=NODE, clock=clock or FakeClock(), background_cycle=background)
    return handle, devices


@pytest.fixture
def served() -> Iterator[tuple[ExporterHandle, FakeDeviceSource, FakeClock]]:
    clock = FakeClock()
    handle, devices = start(ExporterSettings(listen="127.0.0.1:0", max_concurrent_requests=32), clock)
    yield handle, devices, clock
    handle.stop()


def test_twenty_concurrent_scrapes_get_the_same_bytes_and_no_extra_device_reads(served) -> None:  # type: ignore[no-untyped-def]
    handle, devices, _ = served
    with ThreadPoolExecutor(20) as pool:
        results = list(pool.map(lambda _: http_get(handle.url + "/metrics"), range(20)))
    assert {status for status, _, _ in results} == {200}
    assert len({body for _, _, body in results}) == 1
    assert devices.reads == 1


def test_scrapes_during_background_cycles_are_consistent_and_never_read_devices() -> None:
    handle, devices = start(ExporterSettings(listen="127.0.0.1:0", interval_seconds=0.02,
                                             max_concurrent_requests=32), background=True)
    try:
        with ThreadPoolExecutor(20) as pool:
            results = list(pool.map(lambda _: http_get(handle.url + "/metrics"), range(60)))
    finally:
        handle.stop()
    for status, _, body in results:
        assert status == 200
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        assert len(families["gpulens_allocation_gpu_equivalents"].samples) == len(every_family_allocations())
    assert devices.reads == handle.cycle.state().cycles_total


def test_healthz_is_200_while_cycles_are_recent_and_503_with_a_reason_when_stale(served) -> None:  # type: ignore[no-untyped-def]
    handle, devices, clock = served
    status, _, body = http_get(handle.url + "/healthz")
    assert status == 200 and body.startswith(b"ok")
    clock.advance(60)
    status, _, body = http_get(handle.url + "/healthz")
    assert status == 503 and b"60.0s ago" in body
    devices.fail_with = RuntimeError("NVML driver not loaded")
    handle.cycle.run_once()
    status, _, body = http_get(handle.url + "/healthz")
    assert status == 503 and b"NVML driver not loaded" in body


def test_metrics_negotiates_gzip_and_openmetrics(served) -> None:  # type: ignore[no-untyped-def]
    handle, _, _ = served
    _, plain_headers, plain = http_get(handle.url + "/metrics")
    assert plain_headers["Content-Type"].startswith("text/plain; version=0.0.4")
    _, headers, body = http_get(handle.url + "/metrics", {"Accept-Encoding": "gzip"})
    assert headers["Content-Encoding"] == "gzip" and gzip.decompress(body) == plain
    _, headers, body = http_get(handle.url + "/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"})
    assert headers["Content-Type"].startswith("application/openmetrics-text") and body.endswith(b"# EOF\n")
    assert http_get(handle.url + "/nope")[0] == 404


def test_requests_beyond_the_concurrency_cap_get_503_at_once() -> None:
    slow = SlowCollector()  # once armed, one /metrics request stays in flight
    entered, release = slow.entered, slow.release
    registry = CollectorRegistry(auto_describe=False)
    registry.register(slow)
    clock = FakeClock()
    cycle, _, _ = fake_cycle(every_family_readings(), clock=clock)
    settings = ExporterSettings(listen="127.0.0.1:0", max_concurrent_requests=1)
    server = build_server(cycle, settings, backend="sim", registry=registry, prerender=False, clock=clock)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.port}"
    try:
        cycle.run_once()
        slow.armed = True
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(http_get, url + "/metrics")
            assert entered.wait(10)
            status, headers, body = http_get(url + "/metrics")
            assert (status, body) == (503, b"too many concurrent requests\n")
            assert headers["Retry-After"] == "1"
            assert http_get(url + "/healthz")[0] == 200  # liveness probes are never capped
            release.set()
            assert pending.result(10)[0] == 200
        deadline = time.monotonic() + 5  # the slot is released right after the response is written
        while http_get(url + "/")[0] != 200:
            assert time.monotonic() < deadline, "slot never released"
            time.sleep(0.01)
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def _auth(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_basic_auth_protects_metrics_but_not_healthz(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("# scrapers\nprometheus:" + hashlib.sha256(b"s3cret:pw").hexdigest() + "\n")
    handle, _ = start(ExporterSettings(listen="127.0.0.1:0", basic_auth_file=users))
    try:
        status, headers, _ = http_get(handle.url + "/metrics")
        assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
        assert http_get(handle.url + "/metrics", _auth("prometheus", "wrong"))[0] == 401
        assert http_get(handle.url + "/metrics", _auth("nobody", "s3cret:pw"))[0] == 401
        status, _, body = http_get(handle.url + "/metrics", _auth("prometheus", "s3cret:pw"))
        assert status == 200 and b"gpulens_gpu_info" in body
        assert http_get(handle.url + "/healthz")[0] == 200
    finally:
        handle.stop()


def test_a_malformed_basic_auth_file_is_a_clear_user_error(tmp_path: Path) -> None:
    bad = tmp_path / "users"
    bad.write_text("prometheus:plaintext-password\n")
    with pytest.raises(UserError, match=r"users:1: expected 'user:<bcrypt hash>'"):
        load_basic_auth_file(bad)
    with pytest.raises(UserError, match="cannot read basic-auth file"):
        load_basic_auth_file(tmp_path / "missing")


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    openssl = require_binary("openssl")
    cert, key = directory / "tls.crt", directory / "tls.key"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def test_tls_serves_metrics_over_https_with_basic_auth(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    users = tmp_path / "users"
    users.write_text("prom:" + hashlib.sha256(b"pw").hexdigest() + "\n")
    handle, _ = start(ExporterSettings(listen="127.0.0.1:0", tls_cert_file=cert, tls_key_file=key,
                                       basic_auth_file=users))
    try:
        assert handle.url.startswith("https://")
        client = ssl.create_default_context(cafile=str(cert))
        status, _, body = http_get(handle.url + "/metrics", _auth("prom", "pw"), context=client)
        assert status == 200 and b"gpulens_device_gpu_equivalents" in body
        assert http_get(handle.url + "/metrics", context=client)[0] == 401
        with pytest.raises(OSError):  # plain HTTP to the TLS port gets no HTTP answer
            http_get(handle.url.replace("https://", "http://") + "/healthz", timeout=5)
        assert http_get(handle.url + "/healthz", context=client)[0] == 200
    finally:
        handle.stop()


def test_a_bad_certificate_is_a_clear_user_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    cycle, _, _ = fake_cycle(every_family_readings())
    with pytest.raises(UserError, match="cannot load TLS certificate"):
        build_server(cycle, ExporterSettings(listen="127.0.0.1:0", tls_cert_file=junk, tls_key_file=junk),
                     backend="sim")


def test_a_busy_port_is_a_clear_user_error(served) -> None:  # type: ignore[no-untyped-def]
    handle, _, _ = served
    cycle, _, _ = fake_cycle(every_family_readings())
    with pytest.raises(UserError, match=f"cannot listen on 127.0.0.1:{handle.server.port}"):
        build_server(cycle, ExporterSettings(listen=f"127.0.0.1:{handle.server.port}"), backend="sim")


def test_a_kept_alive_connection_serves_many_scrapes(served) -> None:  # type: ignore[no-untyped-def]
    handle, devices, _ = served
    conn = http.client.HTTPConnection("127.0.0.1", handle.server.port, timeout=10)
    try:
        bodies = []
        for _ in range(3):
            conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
            resp = conn.getresponse()
            assert resp.status == 200 and resp.getheader("Connection") is None
            bodies.append(gzip.decompress(resp.read()))
        sock = conn.sock
        conn.request("GET", "/healthz")
        assert conn.getresponse().read().startswith(b"ok") and conn.sock is sock  # same TCP connection
    finally:
        conn.close()
    assert len(set(bodies)) == 1 and devices.reads == 1
