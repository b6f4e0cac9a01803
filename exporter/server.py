"""The exporter's HTTP server: ``/metrics`` (cached exposition) and ``/healthz``, with optional TLS,
basic auth and a cap on concurrent requests; plus ``serve_in_thread`` to run whole exporters in-process.

Hostile clients: credentials are checked before a request takes one of the ``--max-concurrent-requests``
slots; a slot is held only while the answer is prepared, never while it is written; a write to a client
that does not read is bounded by ``--write-timeout``, then the connection is closed; a kept-alive
connection serves at most ``MAX_REQUESTS_PER_CONNECTION`` requests.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client.registry import CollectorRegistry

from exporter.auth import MIGRATE_HINT, BasicAuthUsers, load_basic_auth_file
from exporter.cycle import CollectionCycle, ExporterState, health_status
from exporter.exposition import ExpositionCache, SnapshotCollector, wants_gzip, wants_openmetrics
from exporter.settings import Backend, ExporterSettings
from exporter.web_config import WebConfig, load_web_config
from gpulens.core import __version__
from gpulens.core.device_model import AllocationSource, DeviceSource
from gpulens.core.errors import UserError

log = logging.getLogger(__name__)

INDEX_HTML = (
    b"<!doctype html><html><head><title>gpulens exporter</title></head><body>"
    b"<h1>gpulens exporter</h1><p><a href=\"/metrics\">/metrics</a> <a href=\"/healthz\">/healthz</a></p>"
    b"</body></html>\n"
)
MAX_REQUESTS_PER_CONNECTION = 1000
"""Requests served on one kept-alive connection before it is closed (bounds pipelining per connection)."""


def tls_context(cert_file: Path, key_file: Path) -> ssl.SSLContext:
    """A server-side TLS context (TLS 1.2+) from PEM files; problems become a ``UserError``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(cert_file), str(key_file))
    except (OSError, ssl.SSLError) as exc:
        raise UserError(f"cannot load TLS certificate {cert_file} / key {key_file}: {exc}") from exc
    return context


def auth_warnings(settings: ExporterSettings, web: WebConfig) -> list[str]:
    """Loud warnings to print at start: users whose passwords are stored as unsalted SHA-256 digests."""
    legacy = web.users.legacy_users if web.users is not None else []
    if not legacy:
        return []
    return [f"--basic-auth-file {settings.basic_auth_file}: {len(legacy)} user(s) ({', '.join(legacy)}) have "
            "unsalted SHA-256 password digests, which a leaked file gives up offline in minutes; "
            f"{MIGRATE_HINT}"]


def web_config_of(settings: ExporterSettings) -> WebConfig:
    """TLS, users and headers from ``--web.config.file``, or from the older TLS and basic-auth flags."""
    if settings.web_config_file is not None:
        return load_web_config(settings.web_config_file)
    users = load_basic_auth_file(settings.basic_auth_file) if settings.basic_auth_file is not None else None
    context = None
    if settings.tls_cert_file is not None and settings.tls_key_file is not None:
        context = tls_context(settings.tls_cert_file, settings.tls_key_file)
    return WebConfig(ssl_context=context, users=users)


class _Handler(BaseHTTPRequestHandler):
    server: ExporterHTTPServer
    protocol_version = "HTTP/1.1"
    timeout = 30
    server_version = "gpulens"
    sys_version = ""  # no Python version banner in the Server header

    def version_string(self) -> str:
        return self.server_version

    def do_GET(self) -> None:  # noqa: N802 - http.server naming
        self._serve(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._serve(head=True)

    def _serve(self, *, head: bool) -> None:
        """Health outside everything; then auth, then a slot only while the answer is prepared.

        Auth comes first, so a request without valid credentials never takes a slot; the slot is released
        before the answer is written, so a client that never reads holds a thread until the write
        timeout, never a slot.
        """
        srv = self.server
        path = self.path.split("?", 1)[0]
        if path == "/healthz":  # cheap and outside the cap: a scrape burst must not fail liveness probes
            ok, reason = health_status(srv.state(), srv.clock(), srv.health_max_age_seconds)
            self._reply(200 if ok else 503, (reason + "\n").encode(), "text/plain; charset=utf-8", head=head)
            return
        if srv.users is not None and not srv.users.check(self.headers.get("Authorization")):
            self._reply(401, b"unauthorized\n", "text/plain; charset=utf-8", head=head,
                        extra={"WWW-Authenticate": 'Basic realm="gpulens"'})
            return
        if path == "/":
            self._reply(200, INDEX_HTML, "text/html; charset=utf-8", head=head)
            return
        if path != "/metrics":
            self._reply(404, b"not found\n", "text/plain; charset=utf-8", head=head)
            return
        if not srv.slots.acquire(blocking=False):
            self._reply(503, b"too many concurrent requests\n", "text/plain; charset=utf-8", head=head,
                        extra={"Retry-After": "1"})
            return
        try:
            rendered = srv.cache.render(
                openmetrics=wants_openmetrics(self.headers.get("Accept")),
                gzipped=wants_gzip(self.headers.get("Accept-Encoding")),
            )
        finally:
            srv.slots.release()
        extra = {"Content-Encoding": "gzip"} if rendered.gzipped else {}
        self._reply(200, rendered.body, rendered.content_type, head=head, extra=extra)

    def _reply(self, status: int, body: bytes, content_type: str, *, head: bool,
               extra: dict[str, str] | None = None) -> None:
        """Status line, headers and body in one write (no Nagle/delayed-ACK stall on kept-alive connections).

        The write may take at most the server's write timeout; past it the connection is closed
        (``handle_one_request`` turns the ``TimeoutError`` into a closed connection).
        """
        self.log_request(status, len(body))
        lines = [
            f"{self.protocol_version} {status} {self.responses[status][0]}",
            f"Date: {self.date_time_string()}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(body)}",
            *(f"{name}: {value}" for name, value in self.server.extra_headers.items()),
            *(f"{name}: {value}" for name, value in (extra or {}).items()),
        ]
        self.served += 1
        if self.served >= self.server.max_requests_per_connection:
            self.close_connection = True
        if self.close_connection:
            lines.append("Connection: close")
        head_bytes = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.connection.settimeout(self.server.write_timeout_seconds)
        try:
            self.wfile.write(head_bytes if head else head_bytes + body)
        finally:
            self.connection.settimeout(self.timeout)

    def setup(self) -> None:
        super().setup()
        self.served = 0

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        log.debug("%s %s", self.address_string(), format % args)


class ExporterHTTPServer(ThreadingHTTPServer):
    """Threaded HTTP server whose handlers read the cached exposition and the cycle's state."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # the default 5 makes a burst of scrapers wait for SYN retransmits (1 s)

    def __init__(
        self,
        address: tuple[str, int],
        *,
        cache: ExpositionCache,
        state: Callable[[], ExporterState],
        health_max_age_seconds: float,
        max_concurrent_requests: int = 8,
        users: BasicAuthUsers | None = None,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.time,
        write_timeout_seconds: float = 10.0,
        max_requests_per_connection: int = MAX_REQUESTS_PER_CONNECTION,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.cache = cache
        self.state = state
        self.health_max_age_seconds = health_max_age_seconds
        self.slots = threading.BoundedSemaphore(max_concurrent_requests)
        self.users = users
        self.ssl_context = ssl_context
        self.clock = clock
        self.write_timeout_seconds = write_timeout_seconds
        self.max_requests_per_connection = max_requests_per_connection
        self.extra_headers = dict(headers or {})
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        try:
            super().__init__(address, _Handler)
        except OSError as exc:
            raise UserError(f"cannot listen on {address[0]}:{address[1]}: {exc.strerror or exc}") from exc

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Runs in the request's thread: the TLS handshake happens here, never in the accept loop."""
        with contextlib.suppress(OSError):
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_context is not None:
            request.settimeout(_Handler.timeout)
            request = self.ssl_context.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("request from %s failed", client_address, exc_info=True)

    @property
    def port(self) -> int:
        return int(self.server_address[1])


def build_server(
    cycle: CollectionCycle,
    settings: ExporterSettings,
    *,
    backend: str,
    registry: CollectorRegistry | None = None,
    clock: Callable[[], float] = time.time,
    prerender: bool = True,
    web: WebConfig | None = None,
) -> ExporterHTTPServer:
    """An HTTP server for ``cycle`` per ``settings`` (not started).

    ``registry`` may hold extra collectors; with ``prerender`` the exposition is rendered right after each
    cycle (on the cycle's thread) instead of by the first scrape.
    """
    registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(cycle.state, backend=backend, version=__version__))
    cache = ExpositionCache(registry, cycle.state)
    if prerender:
        cycle.add_listener(cache.warm)
    web = web if web is not None else web_config_of(settings)
    return ExporterHTTPServer(
        settings.listen_address,
        cache=cache,
        state=cycle.state,
        health_max_age_seconds=settings.effective_health_max_age_seconds,
        max_concurrent_requests=settings.max_concurrent_requests,
        users=web.users,
        ssl_context=web.ssl_context,
        clock=clock,
        write_timeout_seconds=settings.write_timeout_seconds,
        headers=web.headers,
    )


def open_sources(settings: ExporterSettings) -> tuple[DeviceSource, AllocationSource, str, str]:
    """(device source, allocation source, backend name, node) for ``settings``; a ``UserError`` if it cannot.

    ``sim`` uses the scenario's node (the first one by default); ``nvml`` and ``auto`` open NVML and the
    kubelet and never fall back to the simulator.
    """
    if settings.backend is Backend.SIM:
        from gpulens.sim.fleet import SimulatedFleet
        from gpulens.sim.scenario_file import load_scenario

        fleet = SimulatedFleet(load_scenario(settings.scenario))
        names = fleet.node_names()
        node = settings.node or names[0]
        if node not in names:
            raise UserError(f"node {node!r} is not in the scenario (nodes: {', '.join(names)})")
        source = fleet.source(node, attribute_processes=settings.attribute_processes)
        return source, source, "sim", node
    try:
        from exporter.backends import node_name, open_nvml_backend
    except ImportError as exc:
        raise UserError(f"--backend {settings.backend.value}: the NVML backend is not available ({exc})") from exc
    devices, allocations = open_nvml_backend(settings)
    return devices, allocations, "nvml", node_name(settings)


@dataclass
class ExporterHandle:
    """A running in-process exporter: its URL, cycle and server; ``stop()`` shuts both down."""

    url: str
    cycle: CollectionCycle
    server: ExporterHTTPServer
    node: str
    device_source: DeviceSource
    allocation_source: AllocationSource
    _thread: threading.Thread
    _close_sources: bool

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.cycle.stop()
        self._thread.join(10)
        if self._close_sources:
            self.device_source.close()
            if self.allocation_source is not self.device_source:
                self.allocation_source.close()

    def __enter__(self) -> ExporterHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_in_thread(
    settings: ExporterSettings | None = None,
    *,
    device_source: DeviceSource | None = None,
    allocation_source: AllocationSource | None = None,
    node: str | None = None,
    clock: Callable[[], float] = time.time,
    background_cycle: bool = True,
    backend: str | None = None,
) -> ExporterHandle:
    """Run an exporter in this process on a free loopback port (default ``127.0.0.1:0``).

    With no sources, they come from ``settings`` (``--backend sim`` by default). The first cycle runs
    before this returns, so the first scrape has data. ``background_cycle=False`` leaves further cycles to
    the caller (``handle.cycle.run_once()``), which tests and virtual-time demos use.
    """
    settings = settings or ExporterSettings(listen="127.0.0.1:0")
    close_sources = device_source is None
    if device_source is None:
        device_source, allocation_source, opened_backend, opened_node = open_sources(settings)
        backend = backend or opened_backend
        node = node or opened_node
    if allocation_source is None:
        raise ValueError("allocation_source is required when device_source is given")
    node = node or settings.node or "node"
    cycle = CollectionCycle(device_source, allocation_source, node=node,
                            interval_seconds=settings.interval_seconds, clock=clock)
    server = build_server(cycle, settings, backend=backend or settings.backend.value, clock=clock)
    cycle.run_once()
    if background_cycle:
        cycle.start()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                              name=f"gpulens-http-{node}", daemon=True)
    thread.start()
    host = server.server_address[0]
    host = host.decode() if isinstance(host, bytes) else str(host)
    scheme = "https" if server.ssl_context is not None else "http"
    url = f"{scheme}://{'[' + host + ']' if ':' in host else host}:{server.port}"
    return ExporterHandle(url, cycle, server, node, device_source, allocation_source, thread, close_sources)
