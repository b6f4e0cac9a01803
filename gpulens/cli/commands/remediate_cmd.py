"""`gpulens remediate`: taint the nodes of failing GPUs (dry-run YAML by default, guarded server-side apply)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulens.cli.flag_errors import finite
from gpulens.core.errors import UserError

if TYPE_CHECKING:
    from gpulens.analytics.remediation.policy import RemediationPolicy
    from gpulens.analytics.remediation.run import RemediationReport

REMEDIATE_HELP = (
    "Keep new work off nodes whose GPUs are failing or trending towards failure: the drain candidates of "
    "the latest `gpulens analyze` health run get the taint gpulens.io/gpu-unhealthy=<reason>:NoSchedule, "
    "with the evidence, the window and the run in annotations.\n\n"
    "Dry run by default: writes one YAML file per Node to --out and changes nothing. --apply reads the live "
    "Nodes and sends the taints with server-side apply (field manager gpulens), one outcome per Node. "
    "Guard rails: at most --max-share of a flavor's nodes tainted at once (default 10 %), never the last "
    "untainted node of a flavor, taints removed after --healthy-hours without a signal, and Nodes annotated "
    "gpulens.io/remediate: \"false\" are left alone.\n\n"
    "Example: gpulens remediate --db gpulens.duckdb --out taints/"
)


def register(app: typer.Typer) -> None:
    """Add the `remediate` command to `app`."""

    @app.command("remediate", help=REMEDIATE_HELP)
    def remediate_command(
        db: Annotated[Path, typer.Option("--db", help="The DuckDB store with a health run (gpulens analyze / demo).")],
        out: Annotated[Path, typer.Option("--out", help="Directory for the Node YAML that would be applied.")] = Path(
            "gpulens-remediation"
        ),
        apply: Annotated[bool, typer.Option("--apply", help="Apply with server-side apply (default: dry run).")] = False,
        kubeconfig: Annotated[
            Path | None, typer.Option("--kubeconfig", help="Kubeconfig for --apply (default: $KUBECONFIG, ~/.kube/config).")
        ] = None,
        max_share: Annotated[
            float, typer.Option("--max-share", callback=finite, help="Most of a flavor's nodes tainted at once, in %.")
        ] = 10.0,
        healthy_hours: Annotated[
            float, typer.Option("--healthy-hours", callback=finite, help="Remove the taint after this many hours without a signal.")
        ] = 24.0,
        no_execute: Annotated[
            bool, typer.Option("--no-execute-on-drain", help="Use NoExecute (evicts pods) for drain-state nodes.")
        ] = False,
    ) -> None:
        from pydantic import ValidationError

        from gpulens.analytics.remediation.policy import RemediationPolicy
        from gpulens.analytics.remediation.run import plan, write_dry_run
        from gpulens.core.config import describe_validation_error

        try:
            policy = RemediationPolicy(
                max_share=max_share / 100, healthy_seconds=int(healthy_hours * 3600),
                no_execute_states=frozenset({"drain"}) if no_execute else frozenset(),
            )
        except ValidationError as exc:
            msg = describe_validation_error(exc).replace("max_share", "--max-share (as a ratio)")
            raise UserError(f"invalid option: {msg.replace('healthy_seconds', '--healthy-hours')}") from exc
        now = datetime.now(UTC).replace(tzinfo=None)
        report = _apply(db, policy, kubeconfig) if apply else plan(db, policy, now)
        try:
            written = write_dry_run(report, out, now)
        except OSError as exc:
            raise UserError(f"cannot write to {out}: {exc.strerror or exc}") from exc
        typer.echo(report.render())
        typer.echo(f"\nwrote {len(written)} file(s) to {out}" + ("" if apply else " (dry run: nothing applied)"))
        failed = [o for o in report.outcomes if o.status == "failed"]
        if failed:
            raise UserError(f"{len(failed)} Node(s) not changed: {failed[0].node}: {failed[0].message}")


def _apply(db: Path, policy: RemediationPolicy, kubeconfig: Path | None) -> RemediationReport:
    from gpulens.analytics.remediation.run import apply_plan
    from gpulens.exporter.kube_api import KubernetesClient, connection_from_kubeconfig

    with KubernetesClient(connection_from_kubeconfig(kubeconfig)) as api:
        return apply_plan(db, policy, api, clock=lambda: datetime.now(UTC).replace(tzinfo=None))
