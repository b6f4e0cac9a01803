"""`gpulens remediate-serve`: act on Alertmanager's GPU fault alerts with `gpulens remediate`'s policy (dry run by default)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulens.cli.commands.remediate_cmd import (
    BreakerShareOption,
    BreakerWindowOption,
    HealthyHoursOption,
    KubeconfigOption,
    MaxNodesOption,
    MaxShareOption,
    NoExecuteOption,
    ScopeOption,
    build_policy,
)
from gpulens.core.errors import UserError

if TYPE_CHECKING:
    from analytics.remediation.policy import RemediationPolicy

SERVE_HELP = (
    "Receive Alertmanager webhooks (POST /alerts, payload version 4) for the GPU hard-fault and early-warning "
    "alerts of deploy/prometheus and decide at once, with the same policy and guard rails as `gpulens "
    "remediate`: the latest health run of --db gives the fleet and its flavors, each firing alert makes its "
    "node a drain candidate. Dry run by default (decisions logged and recorded, nothing written to the "
    "cluster); --apply quarantines (DRA DeviceTaintRule, else the Node taint) after reading the live "
    "cluster. Idempotent when Alertmanager repeats or regroups alerts; run one replica (one writer by "
    "design). Every --resync it decides again, which lifts quarantines after --healthy-hours. Its own "
    "metrics are on GET /metrics.\n\n"
    "Example: gpulens remediate-serve --db gpulens.duckdb --listen 0.0.0.0:9403"
)


def register(app: typer.Typer) -> None:
    """Add the `remediate-serve` command to `app`."""

    @app.command("remediate-serve", help=SERVE_HELP)
    def remediate_serve_command(
        db: Annotated[Path, typer.Option("--db", help="The DuckDB store with a health run (gpulens analyze).")],
        record_db: Annotated[
            Path | None, typer.Option("--record-db", help="Record the decisions in this store (default: --db); "
                                      "created when missing.")
        ] = None,
        listen: Annotated[str, typer.Option("--listen", help="HOST:PORT to serve on (port 0 = any free port).")] = "0.0.0.0:9403",
        apply: Annotated[bool, typer.Option("--apply", help="Change the cluster (default: dry run).")] = False,
        kubeconfig: KubeconfigOption = None,
        scope: ScopeOption = "auto",
        max_share: MaxShareOption = 10.0,
        max_nodes: MaxNodesOption = None,
        breaker_share: BreakerShareOption = 50.0,
        breaker_window: BreakerWindowOption = "1h",
        healthy_hours: HealthyHoursOption = 24.0,
        no_execute: NoExecuteOption = False,
        resync: Annotated[str, typer.Option("--resync", help="Decide again this often without a new alert.")] = "5m",
        alert_ttl: Annotated[
            str, typer.Option("--alert-ttl", help="A firing alert not sent again for this long counts as ended.")
        ] = "1h",
        request_timeout: Annotated[
            str, typer.Option("--request-timeout", help="--apply: how long to wait for each API request.")
        ] = "30s",
    ) -> None:
        from exporter.settings import parse_listen
        from gpulens.core.timeparse import parse_duration

        policy = build_policy(max_share, max_nodes, breaker_share, breaker_window, healthy_hours, scope, no_execute)
        resync_s = parse_duration(resync, what="--resync")
        ttl_s = parse_duration(alert_ttl, what="--alert-ttl")
        timeout_s = parse_duration(request_timeout, what="--request-timeout")
        try:
            address = parse_listen(listen)
        except ValueError as exc:
            raise UserError(f"--listen: {exc}") from exc
        _check_store(db)
        _serve(db, record_db, policy, address, apply, kubeconfig, (resync_s, ttl_s, timeout_s))


def _check_store(db: Path) -> None:
    """A store that is not one fails now; a store not written yet (a new install, before the first
    ``gpulens analyze``) is only warned about: each alert answers 503 until it is there."""
    from analytics.remediation.plan import NoHealthRun, load_inputs

    if not db.exists():
        typer.echo(f"gpulens: warning: --db {db}: no store yet; alerts are answered 503 until `gpulens analyze` "
                   "has written one", err=True)
        return
    try:
        load_inputs(db)
    except NoHealthRun as exc:
        typer.echo(f"gpulens: warning: {exc}; alerts are answered 503 until then", err=True)


def _serve(db: Path, record_db: Path | None, policy: RemediationPolicy, address: tuple[str, int], apply: bool,
           kubeconfig: Path | None, seconds: tuple[float, float, float]) -> None:
    """Serve until SIGTERM or SIGINT; ``seconds``: the resync period, the alert TTL, the request timeout."""
    import signal
    import threading
    from contextlib import AbstractContextManager

    from analytics.remediation.service import RemediationService
    from analytics.remediation.webhook_server import WEBHOOK_PATH, RemediationServer, resync_loop
    from gpulens.core.kube_api import KubernetesClient, connection_from_kubeconfig

    resync_s, ttl_s, timeout_s = seconds

    api = None
    if apply:
        connection_from_kubeconfig(kubeconfig)  # a bad kubeconfig fails before the first alert

        def api() -> AbstractContextManager[KubernetesClient]:  # a fresh token each time (bound tokens rotate)
            return KubernetesClient(connection_from_kubeconfig(kubeconfig), timeout_s=timeout_s)

    service = RemediationService(db, policy, clock=lambda: datetime.now(UTC).replace(tzinfo=None), api=api,
                                 record_db=record_db, alert_ttl_seconds=ttl_s)
    try:
        server = RemediationServer(address, service, log=lambda line: typer.echo(line, err=True))
    except OSError as exc:
        raise UserError(f"--listen {address[0]}:{address[1]}: {exc.strerror or exc}") from exc
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True).start()
    resync_loop(server, resync_s, stop)
    mode = "--apply: quarantines are written" if apply else "dry run: nothing is written to the cluster"
    typer.echo(f"gpulens remediate-serve: http://{address[0]}:{server.port}{WEBHOOK_PATH} ({mode}), "
               f"metrics on /metrics", err=True)
    try:
        stop.wait()
    finally:
        server.shutdown()
        server.server_close()
