"""The remediation service's HTTP side: Alertmanager's webhook, /metrics, /healthz, and the resync loop.

``POST /alerts`` takes an Alertmanager webhook body (version 4) and answers 200 with what was decided,
400 for a body that is not one (Alertmanager does not retry a 4xx), and 503 when the store or the API
server cannot be read (Alertmanager retries a 5xx). The resync loop decides again every
``resync_seconds``: releases after the healthy period, alerts that expired, records still pending.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from analytics.remediation.alerts import BadWebhook, parse_webhook
from analytics.remediation.service import Evaluation, RemediationService

MAX_BODY_BYTES = 4 * 1024 * 1024
"""Alertmanager sends every alert of a group in one body; 4 MiB holds thousands."""
WEBHOOK_PATH = "/alerts"


class RemediationServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], service: RemediationService,
                 log: Callable[[str], None] = lambda _line: None) -> None:
        self.service = service
        self.log = log
        super().__init__(address, _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line, never a traceback: a client that hung up before the answer (Alertmanager's timeout) says so."""
        import sys

        self.log(f"request from {client_address[0]} not answered: {sys.exc_info()[1]!r}")

    def report(self, ev: Evaluation) -> None:
        for line in ev.lines():
            self.log(line)


class _Handler(BaseHTTPRequestHandler):
    server: RemediationServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        if self.path == "/metrics":
            self._reply(200, self.server.service.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
        elif self.path in ("/healthz", "/readyz"):
            self._reply(200, b"ok\n", "text/plain; charset=utf-8")
        else:
            self._json(404, {"error": f"no such path: {self.path} (POST {WEBHOOK_PATH}, GET /metrics, /healthz)"})

    def do_POST(self) -> None:  # noqa: N802
        metrics = self.server.service.metrics
        if self.path.split("?")[0] != WEBHOOK_PATH:
            self._json(404, {"error": f"POST the Alertmanager webhook to {WEBHOOK_PATH}"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY_BYTES:
            metrics.webhooks.labels("bad-payload").inc()
            self._json(413 if length > MAX_BODY_BYTES else 400, {"error": f"a body of 1 to {MAX_BODY_BYTES} bytes"})
            return
        try:
            webhook = parse_webhook(self.rfile.read(length))
        except BadWebhook as exc:
            metrics.webhooks.labels("bad-payload").inc()
            self.server.log(f"webhook refused: {exc}")
            self._json(400, {"error": str(exc)})
            return
        ev = self.server.service.receive(webhook)
        self.server.report(ev)
        metrics.webhooks.labels("unavailable" if ev.error else "ok").inc()
        self._json(503 if ev.error else 200, ev.as_json())

    def _json(self, status: int, body: dict[str, Any]) -> None:
        self._reply(status, (json.dumps(body) + "\n").encode(), "application/json")

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        return


def resync_loop(server: RemediationServer, every_seconds: float, stop: threading.Event) -> threading.Thread:
    """A daemon thread that calls ``service.resync()`` every ``every_seconds`` until ``stop`` is set."""

    def run() -> None:
        while not stop.wait(every_seconds):
            server.report(server.service.resync())

    thread = threading.Thread(target=run, name="gpulens-remediation-resync", daemon=True)
    thread.start()
    return thread
