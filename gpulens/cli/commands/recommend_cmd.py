"""`gpulens recommend`: rightsizing and quota recommendations, dry-run YAML, guarded server-side apply."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from analytics.quota_targets import QUOTA_TARGETS
from gpulens.cli.flag_errors import Flag, days, finite, percent
from gpulens.core.errors import UserError

if TYPE_CHECKING:
    from analytics.recommend import RecommendationReport

WORKLOADS = "workloads"
"""The ``--target`` of the MIG layout plan and workload patches (files only), beside the quota targets."""

RECOMMEND_HELP = (
    "Recommend device shapes per workload (the smallest MIG profile that fits P95 compute and P99/peak "
    "memory plus headroom, or fewer GPUs) and quotas per queue, flavor and resource (P95 of in-use plus "
    "pending demand plus headroom, never below usage plus pending, no cut while work is pending, no cut on "
    "less than --min-cut-days of evidence or one the stored history contradicts, at most --max-step per "
    "apply), with the reasons and a confidence in days of data.\n\n"
    "Dry run by default: prints a diff per quota object and writes the YAML it would apply to --out "
    "(plus GPUQuotaRecommendation objects). --apply sends it with server-side apply (field manager "
    "gpulens) to Kueue ClusterQueues, KAI Scheduler Queues and/or ResourceQuotas; objects annotated "
    "gpulens.io/auto-apply: "
    "\"false\" are skipped, low-confidence changes are refused, and every applied object gets audit "
    "annotations (from, to, when, recommendation).\n\n"
    "--target workloads writes the MIG side instead (dry-run files only, never applied): a layout plan "
    "choosing which GPUs to repartition into which profiles (valid placements per GPU model), the GPU "
    "Operator's mig-parted config and Node labels in OUT/mig/, and per workload owner the patch that "
    "swaps nvidia.com/gpu for nvidia.com/mig-<profile> (or, with --dra, a ResourceClaimTemplate) in "
    "OUT/workloads/.\n\n"
    "Example: gpulens recommend --db gpulens.duckdb --target kueue --out recs/"
)


FLAGS = {
    "window_days": Flag("--window-days", "days"),
    "percentile": percent("--percentile"),
    "headroom": percent("--headroom"),
    "max_step": percent("--max-step"),
    "low_confidence_days": Flag("--min-confidence-days", "days"),
    "kueue_version": Flag("--kueue-version"),
    "borrowing_limit_ratio": Flag("--borrowing-limit-ratio"),
    "lending_limit_ratio": Flag("--lending-limit-ratio"),
    "record_namespace": Flag("--namespace"),
}
"""The settings field each flag feeds (QuotaSettings and MigFitSettings too): errors name the flag, in its unit."""


def register(app: typer.Typer) -> None:
    """Add the `recommend` command to `app`."""

    @app.command("recommend", help=RECOMMEND_HELP)
    def recommend_command(
        db: Annotated[Path, typer.Option("--db", help="The DuckDB store (gpulens collect / demo).")],
        target: Annotated[
            str | None,
            typer.Option("--target", help=f"Quota objects to write: {QUOTA_TARGETS.help()} (default: every one); "
                         f"or {WORKLOADS} for the MIG layout plan and workload patches."),
        ] = None,
        dra: Annotated[
            bool, typer.Option("--dra", help="With --target workloads: patches request MIG slices through DRA "
                               "ResourceClaimTemplates (resource.k8s.io/v1) instead of the device plugin.")
        ] = False,
        apply: Annotated[bool, typer.Option("--apply", help="Apply with server-side apply (default: dry run).")] = False,
        kubeconfig: Annotated[
            Path | None, typer.Option("--kubeconfig", help="Kubeconfig for --apply (default: $KUBECONFIG, ~/.kube/config).")
        ] = None,
        out: Annotated[
            Path, typer.Option("--out", help="Directory for the YAML that would be applied.")
        ] = Path("gpulens-recommendations"),
        window_days: Annotated[float, typer.Option("--window-days", callback=days(gt=0), help="Evidence window in days.")] = 14.0,
        percentile: Annotated[float, typer.Option("--percentile", callback=finite, help="Quota demand percentile, in %.")] = 95.0,
        headroom: Annotated[float, typer.Option("--headroom", callback=finite, help="Headroom in % (workloads and quotas).")] = 15.0,
        max_step: Annotated[float, typer.Option("--max-step", callback=finite, help="Largest quota change per apply, in %.")] = 25.0,
        min_confidence_days: Annotated[
            float, typer.Option("--min-confidence-days", callback=days(ge=0), help="Apply refuses changes with less confidence (days).")
        ] = 2.0,
        min_cut_days: Annotated[
            float,
            typer.Option("--min-cut-days", callback=days(ge=0), help="A quota cut needs at least this many days of evidence (and must "
                         "hold over the stored history up to --history-days); a shorter window may only raise."),
        ] = 14.0,
        history_days: Annotated[
            float, typer.Option("--history-days", callback=days(gt=0), help="How far back a cut is checked against stored history.")
        ] = 30.0,
        kueue_version: Annotated[
            str, typer.Option("--kueue-version", help="ClusterQueue API version: v1beta1 or v1beta2.")
        ] = "v1beta2",
        borrowing_limit_ratio: Annotated[
            float | None,
            typer.Option("--borrowing-limit-ratio", callback=finite, help="Also set Kueue borrowingLimit = ratio x new nominalQuota."),
        ] = None,
        lending_limit_ratio: Annotated[
            float | None,
            typer.Option("--lending-limit-ratio", callback=finite, help="Also set Kueue lendingLimit = ratio x new nominalQuota."),
        ] = None,
        namespace: Annotated[
            str, typer.Option("--namespace", help="Namespace of the GPUQuotaRecommendation objects.")
        ] = "gpulens",
        request_timeout: Annotated[
            str, typer.Option("--request-timeout", help="With --apply: give up on one API request after this long "
                              "(15s, 1m); that object is reported failed and the run goes on.")
        ] = "30s",
        store: Annotated[
            bool,
            typer.Option("--store/--no-store", help="Record the run in the store's recommendations table "
                         "(--no-store opens the store read-only)."),
        ] = True,
        parquet: Annotated[
            Path | None, typer.Option("--parquet", help="Read fact tables from Hive-partitioned Parquet here "
                                      "(gpulens export-parquet; <dir>/<table>/...), the rest from --db.")
        ] = None,
    ) -> None:
        from pydantic import ValidationError

        from analytics.quota import QuotaSettings
        from analytics.recommend import RecommendSettings, recommend, write_dry_run
        from analytics.rightsizing import MigFitSettings
        from analytics.writers.local_paths import check_out_dir
        from analytics.writers.order import closing_line
        from gpulens.cli.flag_errors import describe_flag_errors
        from gpulens.core.timeparse import parse_duration

        workloads_target = target == WORKLOADS
        if target is not None and not workloads_target and target not in QUOTA_TARGETS.names():
            raise UserError(f"invalid --target {target!r}: use one of "
                            f"{', '.join([*sorted(QUOTA_TARGETS.names()), WORKLOADS])}")
        if dra and not workloads_target:
            raise UserError("--dra applies to --target workloads only")
        if apply and workloads_target:
            raise UserError("--apply: MIG layouts and workload patches are written as files only (repartitioning "
                            "ends the work running on a GPU); review and roll them out as OUT/mig/README.md says")
        timeout_s = parse_duration(request_timeout, what="--request-timeout") if apply else 0.0
        check_out_dir(out, "--out")  # before the store is written or the API server asked
        try:
            settings = RecommendSettings(
                window_days=window_days,
                targets=() if workloads_target else (target,) if target else tuple(sorted(QUOTA_TARGETS.names())),
                kueue_version=kueue_version,
                borrowing_limit_ratio=borrowing_limit_ratio,
                lending_limit_ratio=lending_limit_ratio,
                record_namespace=namespace,
                store_results=store,
                rightsizing=MigFitSettings(headroom=headroom / 100, low_confidence_days=min_confidence_days),
                quota=QuotaSettings(percentile=percentile / 100, headroom=headroom / 100, max_step=max_step / 100,
                                    low_confidence_days=min_confidence_days, min_cut_days=min_cut_days,
                                    history_days=history_days),
            )
            report = recommend(db, settings, parquet_dir=parquet)
        except ValidationError as exc:
            raise UserError(describe_flag_errors(exc, FLAGS)) from exc
        except (FileNotFoundError, ValueError) as exc:
            raise UserError(str(exc)) from exc
        if workloads_target:
            _write_layout(db, report, out, dra)
            return
        try:
            written = write_dry_run(report, out)
        except OSError as exc:
            raise UserError(f"invalid --out {out}: cannot write there ({exc.strerror or exc})") from exc
        if apply:
            report = _apply(report, kubeconfig, timeout_s)
        typer.echo(report.render())
        if apply:
            typer.echo(closing_line(report.outcomes))
        typer.echo(f"\nwrote {len(written)} file(s) to {out}" + ("" if apply else " (dry run: nothing applied)"))
        _exit_on_failures(report)


def _write_layout(db: Path, report: RecommendationReport, out: Path, dra: bool) -> None:
    from analytics.miglayout.run import layout_for_recommendations, write_layout_files

    run = layout_for_recommendations(db, report.window_start, report.window_end, report.workloads)
    try:
        written = write_layout_files(run, out, dra=dra)
    except OSError as exc:
        raise UserError(f"invalid --out {out}: cannot write there ({exc.strerror or exc})") from exc
    typer.echo(report.render())
    typer.echo("")
    typer.echo(run.render())
    typer.echo(f"\nwrote {len(written)} file(s) to {out}/mig and {out}/workloads (dry run: gpulens never applies these)")


def _apply(report: RecommendationReport, kubeconfig: Path | None, timeout_s: float) -> RecommendationReport:
    """Every object gets an outcome (a failing API server fails objects, not the run)."""
    from analytics.recommend import apply_recommendations
    from gpulens.core.kube_api import KubernetesClient, connection_from_kubeconfig

    connection = connection_from_kubeconfig(kubeconfig)
    with KubernetesClient(connection, timeout_s=timeout_s) as api:
        return apply_recommendations(report, api, clock=lambda: datetime.now(UTC))


def _exit_on_failures(report: RecommendationReport) -> None:
    """Exit non-zero (one line, after the outcome table) when an object failed, may have been applied, or was
    not recorded."""
    from analytics.writers.order import unsettled_line

    problem = unsettled_line(report.outcomes)
    unrecorded = [o for o in report.outcomes if o.record_error]
    if problem:
        more = f" (and {len(unrecorded)} recommendation(s) not recorded)" if unrecorded else ""
        head, _, rest = problem.partition("; first: ")
        raise UserError(f"{head}{more}; first: {rest}")
    if unrecorded:
        o = unrecorded[0]
        raise UserError(f"{len(unrecorded)} recommendation(s) not recorded; first: {o.ref}: {o.record_error}")
