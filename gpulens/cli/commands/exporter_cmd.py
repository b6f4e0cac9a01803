"""`gpulens exporter`: serve per-GPU, per-MIG and per-tenant metrics of this node on /metrics."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulens.cli.flag_errors import Flag, duration
from gpulens.core.errors import UserError

if TYPE_CHECKING:

    from exporter.settings import ExporterSettings

HELP = (
    "Serve this node's GPU metrics on /metrics (Prometheus text or OpenMetrics) and /healthz.\n\n"
    "A background cycle reads the devices and the kubelet every --interval; scrapes serve the last snapshot, "
    "so concurrent scrapes never add device reads. Every metric is described in docs/metrics.md.\n\n"
    "Backends: 'sim' serves a node of a simulated fleet (--scenario, --node, --list-nodes); 'nvml' reads the "
    "local GPUs through NVML and the kubelet PodResources socket; 'auto' uses NVML and exits with an error "
    "when NVML cannot load (it never falls back to the simulator).\n\n"
    "/healthz answers 200 while the last successful cycle is recent, 503 with the reason otherwise. "
    "TLS and basic auth come from --web.config.file (also spelled --web-config-file), the exporter-toolkit "
    "YAML that node_exporter and dcgm-exporter read: tls_server_config and basic_auth_users with bcrypt "
    "hashes; everything but /healthz then needs credentials. The older --tls-cert-file, --tls-key-file and "
    "--basic-auth-file still work ('user:<bcrypt hash>' lines; legacy SHA-256 lines are read with a "
    "warning). A request without valid credentials never takes a --max-concurrent-requests slot, and a "
    "client that does not read its answer is disconnected after --write-timeout. "
    "Run it as a non-root user where NVML allows.\n\n"
    "Example: gpulens exporter --backend sim --listen 127.0.0.1:9400"
)


_EXAMPLES = "500ms, 5s, 1m"
FLAGS = {
    "interval_seconds": duration("--interval", _EXAMPLES),
    "kubelet_timeout_seconds": duration("--kubelet-timeout", _EXAMPLES),
    "health_max_age_seconds": duration("--health-max-age", _EXAMPLES),
    "write_timeout_seconds": duration("--write-timeout", _EXAMPLES),
    "web_config_file": Flag("--web.config.file"),
    **{field: Flag("--" + field.replace("_", "-")) for field in (
        "backend", "listen", "scenario", "node", "kubelet_socket", "tenancy_config", "otlp_endpoint", "otlp_protocol",
        "tls_cert_file", "tls_key_file", "basic_auth_file", "max_concurrent_requests", "attribute_processes",
        "log_level",
    )},
}
"""The settings field each flag feeds (errors name the flag, in its unit)."""


def register(app: typer.Typer) -> None:
    """Add the `exporter` command to `app`."""

    @app.command("exporter", help=HELP, no_args_is_help=False)
    def exporter(
        backend: Annotated[str, typer.Option(help="Device backend: sim, nvml or auto.")] = "sim",
        listen: Annotated[str, typer.Option(help="HOST:PORT to serve on (port 0 = any free port).")] = "0.0.0.0:9400",
        scenario: Annotated[
            Path | None, typer.Option(help="Simulator scenario YAML (--backend sim); default: the built-in one.")
        ] = None,
        node: Annotated[str | None, typer.Option(
            help="Node name: a node of the scenario for sim (default: its first); the Kubernetes node name "
            "for nvml (default: $NODE_NAME, else the host name)."
        )] = None,
        list_nodes: Annotated[bool, typer.Option(
            "--list-nodes", help="Print the scenario's node names and exit."
        )] = False,
        interval: Annotated[str, typer.Option(help="Collection interval, e.g. 5s, 500ms, 1m.")] = "5s",
        kubelet_socket: Annotated[str, typer.Option(
            help="kubelet PodResources socket (nvml backend)."
        )] = "unix:///var/lib/kubelet/pod-resources/kubelet.sock",
        kubelet_timeout: Annotated[str, typer.Option(help="Timeout of one PodResources call.")] = "2s",
        tenancy_config: Annotated[
            Path | None, typer.Option(help="YAML of tenant-resolution rules (nvml backend).")
        ] = None,
        otlp_endpoint: Annotated[str | None, typer.Option(
            help="Also export OTLP metrics and traces to this base URL (e.g. http://collector:4318)."
        )] = None,
        otlp_protocol: Annotated[str, typer.Option(help="OTLP transport: http or grpc.")] = "http",
        tls_cert_file: Annotated[Path | None, typer.Option(help="PEM certificate: serve HTTPS.")] = None,
        tls_key_file: Annotated[Path | None, typer.Option(help="PEM private key of --tls-cert-file.")] = None,
        basic_auth_file: Annotated[Path | None, typer.Option(
            help="File of 'user:<bcrypt hash>' lines (htpasswd -nBC 10 USER): everything but /healthz then "
            "needs HTTP basic auth. Prefer --web.config.file."
        )] = None,
        web_config_file: Annotated[Path | None, typer.Option(
            "--web.config.file", "--web-config-file",
            help="exporter-toolkit web config YAML: tls_server_config (cert_file, key_file, client_auth_type, "
            "client_ca_file, min_version, max_version), http_server_config.headers and basic_auth_users "
            "(user: bcrypt hash). Replaces --tls-cert-file, --tls-key-file and --basic-auth-file."
        )] = None,
        max_concurrent_requests: Annotated[int, typer.Option(
            help="/metrics answers prepared at once; more are answered 503 at once. Requests without valid "
            "credentials never take one, and writing an answer never holds one."
        )] = 8,
        write_timeout: Annotated[str, typer.Option(
            help="Longest time writing one answer may take; a client that does not read is then disconnected."
        )] = "10s",
        attribute_processes: Annotated[bool, typer.Option(
            help="Attribute shared GPUs per pod from their processes (needs hostPID; off by default)."
        )] = False,
        health_max_age: Annotated[str | None, typer.Option(
            help="/healthz fails when the last good cycle is older than this (default: 3 x interval, >= 15s)."
        )] = None,
        log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    ) -> None:
        from pydantic import ValidationError

        from exporter.settings import ExporterSettings
        from gpulens.cli.flag_errors import describe_flag_errors

        raw: dict[str, object] = {
            "backend": backend, "listen": listen, "scenario": scenario, "node": node,
            "interval_seconds": interval, "kubelet_socket": kubelet_socket,
            "kubelet_timeout_seconds": kubelet_timeout, "tenancy_config": tenancy_config,
            "otlp_endpoint": otlp_endpoint, "otlp_protocol": otlp_protocol, "tls_cert_file": tls_cert_file,
            "tls_key_file": tls_key_file, "basic_auth_file": basic_auth_file, "web_config_file": web_config_file,
            "write_timeout_seconds": write_timeout,
            "max_concurrent_requests": max_concurrent_requests, "attribute_processes": attribute_processes,
            "health_max_age_seconds": health_max_age, "log_level": log_level,
        }
        try:
            settings = ExporterSettings.model_validate(raw)
        except ValidationError as exc:
            raise UserError(describe_flag_errors(exc, FLAGS)) from exc
        if list_nodes:
            _list_nodes(settings)
            return
        _serve(settings)


def _list_nodes(settings: ExporterSettings) -> None:
    from exporter.settings import Backend

    if settings.backend is not Backend.SIM:
        raise UserError("--list-nodes lists the nodes of a simulator scenario: use it with --backend sim")
    from gpulens.sim.fleet import SimulatedFleet
    from gpulens.sim.scenario_file import load_scenario

    for name in SimulatedFleet(load_scenario(settings.scenario)).node_names():
        typer.echo(name)


def _serve(settings: ExporterSettings) -> None:
    import logging
    import os
    import signal
    import threading

    from exporter.cycle import CollectionCycle
    from exporter.server import auth_warnings, build_server, open_sources, web_config_of

    logging.basicConfig(level=settings.log_level.value.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if settings.node is None and os.environ.get("NODE_NAME"):
        settings = settings.model_copy(update={"node": os.environ["NODE_NAME"]})
    web = web_config_of(settings)  # a bad web config fails before any device is opened
    for warning in auth_warnings(settings, web):
        typer.echo(f"gpulens: warning: {warning}", err=True)
    devices, allocations, backend, node = open_sources(settings)
    cycle = CollectionCycle(devices, allocations, node=node, interval_seconds=settings.interval_seconds)
    server = build_server(cycle, settings, backend=backend, web=web)
    otel = None
    if settings.otlp_endpoint:
        from exporter.otel.setup import start_otel

        otel = start_otel(settings, cycle)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    cycle.start()
    http = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True)
    http.start()
    host, _ = settings.listen_address
    scheme = "https" if server.ssl_context is not None else "http"
    logging.getLogger("gpulens.exporter").info(
        "serving node %s (backend %s) on %s://%s:%d/metrics", node, backend, scheme, host, server.port
    )
    typer.echo(f"gpulens exporter: node {node}, backend {backend}, {scheme}://{host}:{server.port}/metrics",
               err=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        cycle.stop()
        if otel is not None:
            otel.shutdown()
        devices.close()
        if allocations is not devices:
            allocations.close()
