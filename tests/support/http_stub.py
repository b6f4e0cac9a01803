"""A real HTTP server on a loopback port that answers with whatever a test's responder returns."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Responder = Callable[[BaseHTTPRequestHandler], tuple[int, str, bytes]]
"""Given the request handler, returns (status, content type, body)."""


@contextmanager
def http_stand_in(respond: Responder) -> Iterator[str]:
    """A real HTTP server on a free loopback port; ``respond`` gives (status, content type, body)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            try:
                status, ctype, body = respond(self)
            except (BrokenPipeError, ConnectionResetError):
                return
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - silence the test log
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
