"""One HTTP GET bounded in total time and body size, redirects not followed.

httpx's timeouts bound each network operation, not the request: a target that trickles one byte every
2 s keeps a 5 s-timeout request alive for as long as it likes. Here a timer shuts the request's socket
down when the whole-request deadline passes (the socket comes from httpx's documented ``trace`` and
``network_stream`` extensions), so connect, headers and body together take at most ``timeout``; the body
is read in chunks and refused past ``max_bytes`` (checked on ``Content-Length`` first). A redirect is
an error naming where it points: a scrape target never sends the client to another host. Every message
names the target with its credentials redacted (:mod:`gpulens.core.redact`), never the password.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Any

import httpx

from gpulens.core.redact import redact, redact_logs_of

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""Default body cap (64 MiB): an exporter of a full 8-GPU node with MIG answers well under 1 MiB."""


class FetchError(Exception):
    """The request failed, ran past its deadline, sent too much or redirected; the message says which."""


@dataclass(frozen=True)
class Limits:
    """Whole-request deadline (seconds) and body cap (bytes)."""

    timeout: float = 10.0
    max_bytes: int = DEFAULT_MAX_BYTES


def new_client(timeout: float, headers: dict[str, str] | None = None) -> httpx.Client:
    """A client for bounded GETs: no redirects, no kept-alive connections (each GET owns its socket)."""
    redact_logs_of("httpx")  # it logs each request's URL, credentials included
    return httpx.Client(
        timeout=timeout,
        follow_redirects=False,
        headers=headers or {},
        limits=httpx.Limits(max_keepalive_connections=0),
    )


class _Deadline:
    """Shuts the request's socket down when the deadline passes (wakes a read blocked on a trickle)."""

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpx ``trace`` hook: remember the socket as soon as it is connected."""
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            with self._lock:
                self._sock = sock
                if self.expired:
                    self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:g} MiB" if n >= 1024 * 1024 else f"{n} bytes"


def bounded_get(client: httpx.Client, url: str, limits: Limits) -> bytes:
    """The body of a 200 answer to GET ``url`` within ``limits``; anything else raises ``FetchError``."""
    deadline = _Deadline(limits.timeout)
    name = redact(url)
    try:
        with deadline, client.stream("GET", url, extensions={"trace": deadline.trace}) as resp:
            if resp.is_redirect:
                where = resp.headers.get("location", "?")
                raise FetchError(f"{name}: HTTP {resp.status_code} redirect to {redact(where)[:200]} "
                                 "(redirects are not followed)")
            if resp.status_code != 200:
                raise FetchError(f"{name}: HTTP {resp.status_code}")
            declared = resp.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limits.max_bytes:
                raise FetchError(f"{name}: body of {_size(int(declared))} is over the limit of {_size(limits.max_bytes)}")
            chunks = []
            received = 0
            for chunk in resp.iter_bytes():
                received += len(chunk)
                if received > limits.max_bytes:
                    raise FetchError(f"{name}: body is over the limit of {_size(limits.max_bytes)}")
                chunks.append(chunk)
            return b"".join(chunks)
    except httpx.HTTPError as exc:
        if deadline.expired:
            raise FetchError(f"{name}: timed out: the whole request took over {limits.timeout:g}s") from exc
        if isinstance(exc, httpx.TimeoutException):
            raise FetchError(f"{name}: timed out ({exc.__class__.__name__})") from exc
        raise FetchError(f"{name}: {redact(str(exc))}") from exc
