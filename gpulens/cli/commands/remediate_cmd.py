"""`gpulens remediate`: quarantine failing GPUs (a DRA device taint, else a Node taint), dry run by default."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulens.cli.flag_errors import Flag, describe_flag_errors, duration, finite, percent
from gpulens.core.errors import UserError

if TYPE_CHECKING:
    from analytics.remediation.policy import RemediationPolicy
    from analytics.remediation.run import RemediationReport

REMEDIATE_HELP = (
    "Keep new work off failing GPUs, or GPUs trending towards failure: the drain candidates of the latest "
    "`gpulens analyze` health run are quarantined with the taint gpulens.io/gpu-unhealthy=<reason>:NoSchedule, "
    "with the evidence, the window and the run in annotations.\n\n"
    "Scope (--scope): 'device' taints only the failing GPU with a DRA DeviceTaintRule (where the API server "
    "serves DeviceTaintRules and the GPU is a DRA device); 'node' taints the Node; 'auto' (default) takes "
    "the device where it can, else the Node (device-plugin nodes). Node taints are read-modify-write: every "
    "other taint, label and annotation of the Node is kept.\n\n"
    "Dry run by default: reads no cluster, writes one YAML file per change to --out and changes nothing. "
    "--apply reads the live Nodes, DeviceTaintRules and ResourceSlices first; one outcome per node.\n\n"
    "Guard rails, per flavor: at most --max-share of its nodes (default 10 %, rounded down but at least "
    "one) and at most --max-nodes quarantined at once; never its last schedulable node (cordoned, "
    "NotReady and nodes tainted NoSchedule/NoExecute by anyone count as unschedulable); a circuit breaker "
    "holds every new quarantine when more than --breaker-share (default 50 %) of a flavor turned "
    "unhealthy within --breaker-window (default 1h); quarantines lifted after --healthy-hours without a "
    "signal; Nodes annotated gpulens.io/remediate: \"false\" are left alone. With Kueue topology-aware "
    "scheduling, each Node taint's outcome names the TAS workloads Kueue may evict and re-place.\n\n"
    "Example: gpulens remediate --db gpulens.duckdb --out taints/"
)
FLAGS = {
    "max_share": percent("--max-share"),
    "max_nodes": Flag("--max-nodes"),
    "healthy_seconds": Flag("--healthy-hours", "h", 3600.0),
    "breaker_share": percent("--breaker-share"),
    "breaker_seconds": duration("--breaker-window"),
    "scope": Flag("--scope"),
}

ScopeOption = Annotated[str, typer.Option("--scope", help="auto, device (DRA DeviceTaintRule) or node.")]
MaxShareOption = Annotated[
    float, typer.Option("--max-share", callback=finite, help="Most of a flavor's nodes quarantined at once, in % (at least one).")
]
MaxNodesOption = Annotated[
    int | None, typer.Option("--max-nodes", help="Most nodes of a flavor quarantined at once (default: no count cap).")
]
BreakerShareOption = Annotated[
    float, typer.Option("--breaker-share", callback=finite, help="Hold all new quarantines above this % of a flavor turned unhealthy.")
]
BreakerWindowOption = Annotated[
    str, typer.Option("--breaker-window", help="The breaker's window, before the analysed window's end.")
]
HealthyHoursOption = Annotated[
    float, typer.Option("--healthy-hours", callback=finite, help="Lift the quarantine after this many hours without a signal.")
]
NoExecuteOption = Annotated[
    bool, typer.Option("--no-execute-on-drain", help="Use NoExecute (evicts pods) for drain-state nodes.")
]
KubeconfigOption = Annotated[
    Path | None, typer.Option("--kubeconfig", help="Kubeconfig for --apply (default: $KUBECONFIG, ~/.kube/config).")
]


def build_policy(max_share: float, max_nodes: int | None, breaker_share: float, breaker_window: str,
                 healthy_hours: float, scope: str, no_execute: bool) -> RemediationPolicy:
    """The guard rails from the flags (``UserError`` naming the flag of a bad value)."""
    from pydantic import ValidationError

    from analytics.remediation.policy import RemediationPolicy
    from gpulens.core.timeparse import parse_duration

    try:
        return RemediationPolicy(
            max_share=max_share / 100, max_nodes=max_nodes, healthy_seconds=healthy_hours * 3600,
            breaker_share=breaker_share / 100,
            breaker_seconds=parse_duration(breaker_window, what="--breaker-window"),
            scope=scope,  # type: ignore[arg-type]
            no_execute_states=frozenset({"drain"}) if no_execute else frozenset(),
        )
    except ValidationError as exc:
        raise UserError(describe_flag_errors(exc, FLAGS)) from exc


def register(app: typer.Typer) -> None:
    """Add the `remediate` command to `app`."""

    @app.command("remediate", help=REMEDIATE_HELP)
    def remediate_command(
        db: Annotated[Path, typer.Option("--db", help="The DuckDB store with a health run (gpulens analyze / demo).")],
        out: Annotated[Path, typer.Option("--out", help="Directory for the files of what would change (or changed).")] = Path(
            "gpulens-remediation"
        ),
        apply: Annotated[bool, typer.Option("--apply", help="Change the cluster (default: dry run).")] = False,
        kubeconfig: KubeconfigOption = None,
        scope: ScopeOption = "auto",
        max_share: MaxShareOption = 10.0,
        max_nodes: MaxNodesOption = None,
        breaker_share: BreakerShareOption = 50.0,
        breaker_window: BreakerWindowOption = "1h",
        healthy_hours: HealthyHoursOption = 24.0,
        no_execute: NoExecuteOption = False,
        request_timeout: Annotated[
            str, typer.Option("--request-timeout", help="--apply: how long to wait for each API request.")
        ] = "30s",
    ) -> None:
        from analytics.remediation.run import check_out, plan, write_dry_run
        from gpulens.core.timeparse import parse_duration

        policy = build_policy(max_share, max_nodes, breaker_share, breaker_window, healthy_hours, scope, no_execute)
        timeout_s = parse_duration(request_timeout, what="--request-timeout")
        check_out(out)
        now = datetime.now(UTC).replace(tzinfo=None)
        report = _apply(db, policy, kubeconfig, timeout_s) if apply else plan(db, policy, now)
        unrecorded = _record(db, report, now)
        try:
            written = write_dry_run(report, out, now)
        except OSError as exc:
            typer.echo(report.render())
            raise UserError(f"the outcomes above stand, but the files cannot be written to --out {out}: "
                            f"{exc.strerror or exc}") from exc
        typer.echo(report.render())
        typer.echo(f"\nwrote {len(written)} file(s) to {out}" + ("" if apply else " (dry run: nothing applied)"))
        if unrecorded and apply:
            raise UserError(f"the outcomes above stand, but they are not recorded in --db {db}: {unrecorded}")
        if unrecorded:
            typer.echo(f"gpulens: warning: the decisions are not recorded in --db {db}: {unrecorded}", err=True)
        problems = report.problems
        if problems:
            first = problems[0]
            raise UserError(f"{len(problems)} of {len(report.outcomes)} node(s) not known to be changed "
                            f"({', '.join(sorted({p.status for p in problems}))}); first: {first.node}: {first.message}")


def _record(db: Path, report: RemediationReport, now: datetime) -> str:
    """Record the decisions and outcomes in the store; the reason they could not be, else ''."""
    from analytics.remediation.record import record_outcomes

    try:
        record_outcomes(db, report, now)
    except UserError as exc:
        return str(exc)
    return ""


def _apply(db: Path, policy: RemediationPolicy, kubeconfig: Path | None, timeout_s: float) -> RemediationReport:
    from analytics.remediation.run import apply_plan
    from gpulens.core.kube_api import KubernetesClient, connection_from_kubeconfig

    with KubernetesClient(connection_from_kubeconfig(kubeconfig), timeout_s=timeout_s) as api:
        return apply_plan(db, policy, api, clock=lambda: datetime.now(UTC).replace(tzinfo=None))
