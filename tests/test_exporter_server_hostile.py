"""The exporter's HTTP server against hostile clients, on 127.0.0.1 with bounded loops.

Clients that pipeline requests and never read must not take the concurrency cap's slots; requests without
valid credentials never take one; no Python version banner in any answer.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from prometheus_client.registry import CollectorRegistry

from exporter.server import ExporterHandle, build_server, serve_in_thread
from exporter.settings import ExporterSettings
from tests.support.exporter import SlowCollector, fake_cycle, http_get
from tests.support.fakes import (
    NODE,
    FakeAllocationSource,
    FakeClock,
    FakeDeviceSource,
    every_family_allocations,
    every_family_readings,
)
from tests.test_exporter_server import self_signed_cert

PIPELINED = 3000
"""Requests each attacker sends in one go: megabytes of answers, far more than the socket buffers hold."""


def auth_header(user: str, password: str, scheme: str = "Basic") -> dict[str, str]:
    return {"Authorization": f"{scheme} " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def web_config(directory: Path, *, tls: bool, password: str = "pw") -> Path:
    """A web config with one bcrypt user ``prom`` (cost 4, fast in tests) and, with ``tls``, a certificate."""
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()
    lines = ["basic_auth_users:", f"  prom: '{hashed}'"]
    if tls:
        self_signed_cert(directory)
        lines += ["tls_server_config:", "  cert_file: tls.crt", "  key_file: tls.key"]
    path = directory / "web.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start(settings: ExporterSettings) -> ExporterHandle:
    return serve_in_thread(settings, device_source=FakeDeviceSource(every_family_readings()),
                           allocation_source=FakeAllocationSource(every_family_allocations()),
                           node=NODE, clock=FakeClock(), background_cycle=False)


@contextlib.contextmanager
def non_readers(port: int, count: int, request: bytes, context: ssl.SSLContext | None) -> Iterator[list[socket.socket]]:
    """``count`` connections that each pipeline ``PIPELINED`` copies of ``request`` and never read a byte."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fill the server's writes sooner
            raw.connect(("127.0.0.1", port))
            sock = context.wrap_socket(raw, server_hostname="127.0.0.1") if context is not None else raw
            sockets.append(sock)
            sock.settimeout(1.0)
            with contextlib.suppress(TimeoutError, ssl.SSLError, OSError):
                sock.sendall(request * PIPELINED)  # the server stops reading once its writes block
        yield sockets
    finally:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()


@pytest.mark.parametrize(("auth", "tls"), [(False, False), (True, False), (True, True)],
                         ids=["plain", "basic-auth", "https-basic-auth"])
def test_eight_connections_that_never_read_take_no_slots(tmp_path: Path, auth: bool, tls: bool) -> None:
    extra = {"web_config_file": web_config(tmp_path, tls=tls), "write_timeout_seconds": 30} if auth else {}
    handle = start(ExporterSettings(listen="127.0.0.1:0", max_concurrent_requests=8, **extra))
    client = ssl.create_default_context(cafile=str(tmp_path / "tls.crt")) if tls else None
    good = auth_header("prom", "pw") if auth else {}
    credentials = b"".join(f"{k}: {v}\r\n".encode() for k, v in good.items())
    request = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n" + credentials + b"\r\n"
    try:
        assert http_get(handle.url + "/metrics", good, context=client)[0] == 200
        with non_readers(handle.server.port, 8, request, client):
            time.sleep(1.0)  # every attacker's writes are blocked by now
            statuses = [http_get(handle.url + "/metrics", good, timeout=10, context=client)[0] for _ in range(10)]
        assert statuses == [200] * 10
    finally:
        handle.stop()


def test_a_client_that_never_reads_is_disconnected_after_the_write_timeout() -> None:
    handle = start(ExporterSettings(listen="127.0.0.1:0", write_timeout_seconds=0.5))
    try:
        with non_readers(handle.server.port, 1, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", None) as (sock,):
            deadline = time.monotonic() + 15
            closed = False
            sock.settimeout(1.0)
            while not closed and time.monotonic() < deadline:  # drain what the server wrote before it gave up
                try:
                    closed = sock.recv(1 << 20) == b""
                except TimeoutError:
                    continue
                except ConnectionResetError:
                    closed = True
            assert closed, "the server kept writing to a client that did not read"
    finally:
        handle.stop()


def test_requests_without_valid_credentials_never_take_a_slot(tmp_path: Path) -> None:
    slow = SlowCollector()  # one authorised /metrics request holds the only slot once it is armed
    entered, release = slow.entered, slow.release
    registry = CollectorRegistry(auto_describe=False)
    registry.register(slow)
    clock = FakeClock()
    cycle, _, _ = fake_cycle(every_family_readings(), clock=clock)
    settings = ExporterSettings(listen="127.0.0.1:0", max_concurrent_requests=1,
                                web_config_file=web_config(tmp_path, tls=False))
    server = build_server(cycle, settings, backend="sim", registry=registry, prerender=False, clock=clock)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.port}/metrics"
    holder = threading.Thread(target=http_get, args=(url, auth_header("prom", "pw")), daemon=True)
    try:
        cycle.run_once()
        slow.armed = True
        holder.start()
        assert entered.wait(10)
        assert http_get(url)[0] == 401  # not 503: no credentials, no slot asked for
        assert http_get(url, auth_header("prom", "wrong"))[0] == 401
        assert http_get(url, auth_header("prom", "pw"))[0] == 503  # the one slot is held by the slow render
    finally:
        release.set()
        holder.join(10)
        server.shutdown()
        server.server_close()


def _raw_exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        with contextlib.suppress(TimeoutError):
            while chunk := sock.recv(65536):
                chunks.append(chunk)
                if b"\r\n\r\n" in b"".join(chunks):
                    break
        return b"".join(chunks)


def test_no_answer_carries_a_python_version_banner() -> None:
    handle = start(ExporterSettings(listen="127.0.0.1:0"))
    try:
        answers = [
            _raw_exchange(handle.server.port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"),
            _raw_exchange(handle.server.port, b"BOGUS / HTTP/1.1\r\nHost: x\r\n\r\n"),
            _raw_exchange(handle.server.port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n"),
            _raw_exchange(handle.server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
        ]
    finally:
        handle.stop()
    for answer in answers:
        assert answer.startswith(b"HTTP/1.")
        assert b"Python" not in answer and b"BaseHTTP" not in answer, answer[:300]
