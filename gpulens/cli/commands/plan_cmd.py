"""`gpulens plan`: one quota plan for every ClusterQueue of each flavor and resource, decided together."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpulens.cli.flag_errors import days
from gpulens.core.errors import UserError

if TYPE_CHECKING:
    from analytics.plan.model import FleetPlan
    from analytics.writers.apply import ApplyOutcome
    from analytics.writers.live_totals import LiveTotal
    from analytics.writers.plan import ObjectPlan

PLAN_HELP = (
    "Plan the nominalQuota of every Kueue ClusterQueue of each ResourceFlavor and resource together, under "
    "the flavor's capacity (devices on its nodes, minus health's drain candidates, or --capacity FILE) "
    "less a resilience reserve (default n+1: the largest node; none on a flavor whose nodes are all dedicated "
    "to one tenant), with per-queue guarantees, weights, tenant budgets and one step per apply (--policy FILE). Demand per queue is what `gpulens recommend` asks; no "
    "queue with pending work is cut. Method: weighted max-min fairness by water-filling, in whole units; "
    "the same store and policy give the same plan.\n\n"
    "Explains the binding constraint per queue and what relaxing it gives. When the guarantees and holds of a "
    "flavor and resource exceed its capacity, the conflict is reported with amounts and its queues keep their "
    "quotas; the other pools are planned and written, and the exit status (3) says there was a conflict.\n\n"
    "Dry run by default: writes the ClusterQueue YAML it would apply to --out. --apply sends it with "
    "server-side apply (field manager gpulens) with the guard rails of `recommend`, one outcome per object: "
    "every cut first, then the raises of each flavor only if all its cuts landed, so no flavor goes over "
    "capacity; after a partial apply each flavor's live total is read back and shown against its capacity. "
    "--add-capacity FLAVOR=N (what-if) shows which queues gain and which stop waiting; it writes nothing.\n\n"
    "KAI Scheduler queues are planned too: the top-level queues share the cluster's GPUs (pool kai in "
    "--capacity), the children of a queue share its quota (a raise beyond it is refused); they are written "
    "through the KAI writer. Volcano queues are planned and shown, never written.\n\n"
    "Example: gpulens plan --db gpulens.duckdb --capacity capacity.yaml --policy policy.yaml --out plan/"
)

_ADD = re.compile(r"^(?P<flavor>[^=/]+)(/(?P<resource>[^=]+))?=(?P<n>\d+)$")


def parse_add_capacity(values: list[str]) -> dict[tuple[str, str], int]:
    """``FLAVOR=N`` (nvidia.com/gpu) or ``FLAVOR/RESOURCE=N`` -> {(flavor, resource): N}."""
    from analytics.plan.policy import MAX_UNITS

    out: dict[tuple[str, str], int] = {}
    for v in values:
        m = _ADD.match(v.strip())
        if not m:
            raise UserError(f"invalid --add-capacity {v!r}: use FLAVOR=N or FLAVOR/RESOURCE=N (N a whole number)")
        key = (m["flavor"], m["resource"] or "nvidia.com/gpu")
        out[key] = out.get(key, 0) + int(m["n"])
        if out[key] > MAX_UNITS:
            raise UserError(f"invalid --add-capacity {v!r}: at most {MAX_UNITS:,} units per flavor and resource")
    return out


def register(app: typer.Typer) -> None:
    """Add the `plan` command to `app`."""

    @app.command("plan", help=PLAN_HELP)
    def plan_command(
        db: Annotated[Path, typer.Option("--db", help="The DuckDB store (gpulens collect / demo).")],
        capacity: Annotated[
            Path | None, typer.Option("--capacity", help="YAML: flavors: {FLAVOR: {RESOURCE: UNITS}} (overrides the store).")
        ] = None,
        policy: Annotated[
            Path | None, typer.Option("--policy", help="YAML plan policy: weights, guarantees, budgets, reserve, step.")
        ] = None,
        add_capacity: Annotated[
            list[str] | None,
            typer.Option("--add-capacity", help="What-if: FLAVOR=N (or FLAVOR/RESOURCE=N) more units; writes nothing."),
        ] = None,
        min_cut_days: Annotated[
            float | None,
            typer.Option("--min-cut-days", callback=days(ge=0), help="A quota cut needs at least this many days of "
                         "evidence, the rule of `gpulens recommend` (default: the policy's min_evidence_days_to_cut, 14)."),
        ] = None,
        apply: Annotated[bool, typer.Option("--apply", help="Apply with server-side apply (default: dry run).")] = False,
        kubeconfig: Annotated[
            Path | None, typer.Option("--kubeconfig", help="Kubeconfig for --apply (default: $KUBECONFIG, ~/.kube/config).")
        ] = None,
        out: Annotated[Path, typer.Option("--out", help="Directory for the YAML that would be applied.")] = Path(
            "gpulens-plan"
        ),
        store: Annotated[
            bool, typer.Option("--store/--no-store", help="Record the plan in the store's quota_plan table.")
        ] = True,
        request_timeout: Annotated[
            str, typer.Option("--request-timeout", help="With --apply: give up on one API request after this long "
                              "(15s, 1m); a write without an answer is read back, else reported as may have been "
                              "applied.")
        ] = "30s",
    ) -> None:
        from analytics.plan.fleet import PlanConflict, plan_store
        from analytics.plan.output import object_plans, write_plan_yaml
        from analytics.plan.policy import load_capacity, load_policy
        from analytics.plan.record import record_outcomes
        from analytics.plan.render import render_plan, render_what_if
        from analytics.writers.local_paths import check_out_dir
        from analytics.writers.order import unsettled_line
        from gpulens.core.timeparse import parse_duration

        extra = parse_add_capacity(add_capacity or [])
        if extra and apply:
            raise UserError("--add-capacity is a what-if: it cannot be combined with --apply")
        timeout_s = parse_duration(request_timeout, what="--request-timeout")
        if not extra:
            check_out_dir(out, "--out")  # before the store is written or the API server asked
        plan_policy = load_policy(policy)
        if min_cut_days is not None:
            plan_policy = plan_policy.model_copy(update={"min_evidence_days_to_cut": min_cut_days})
        capacity_file = load_capacity(capacity)
        base = plan_store(db, plan_policy, capacity=capacity_file, store=store and not extra)
        if extra:
            what_if = plan_store(db, plan_policy, capacity=capacity_file, extra=extra, store=False)
            typer.echo(render_plan(base))
            typer.echo("")
            typer.echo(render_what_if(base, what_if, extra))
            return
        typer.echo(render_plan(base))
        objects = object_plans(base)
        try:
            written = write_plan_yaml(base, objects, out)
        except OSError as exc:
            raise UserError(f"invalid --out {out}: cannot write there ({exc.strerror or exc})") from exc
        typer.echo("")
        for obj in objects:
            managed = None if apply else obj.managed_refusal()
            if managed:
                typer.echo(f"{obj.ref}: refused: {managed}")
            elif obj.applicable:
                typer.echo(obj.diff(base.generated_at))
            for r in obj.refused:
                typer.echo(f"{obj.ref} {r.key.flavor}/{r.key.resource}: refused, low confidence "
                           f"{r.confidence.value:.1f} days")
        outcomes: list[ApplyOutcome] = []
        if apply:
            outcomes, totals = _apply(base, objects, kubeconfig, timeout_s)
            _echo_outcomes(outcomes, totals)
        typer.echo(f"\nwrote {len(written)} file(s) to {out}" + ("" if apply else " (dry run: nothing applied)"))
        problem = unsettled_line(outcomes)
        if apply and store:
            try:
                record_outcomes(db, base.run_id, {obj.name: (o.status, o.message) for obj, o in zip(objects, outcomes,
                                                                                                      strict=True)})
            except UserError as exc:
                problem = "; ".join(filter(None, [problem, f"outcomes not recorded in quota_plan: {exc}"]))
        if problem:
            raise UserError("; ".join(filter(None, [problem, base.conflict_line])))
        if base.conflict_line:
            raise PlanConflict(base.conflict_line)


def _echo_outcomes(outcomes: list[ApplyOutcome], totals: list[LiveTotal]) -> None:
    """One line per object, the live totals after a partial apply, and the counts of every outcome."""
    from analytics.writers.order import closing_line

    for o in outcomes:
        typer.echo(f"{o.ref}: {o.status.upper()}: {o.message}")
    if totals:
        typer.echo("\nlive totals after a partial apply (read back from the API server; capacity for nominal "
                   "quotas, after drains and the reserve):")
        for t in totals:
            typer.echo(f"  {t.line()}")
    typer.echo(closing_line(outcomes))


def _apply(
    plan: FleetPlan, objects: list[ObjectPlan], kubeconfig: Path | None, timeout_s: float
) -> tuple[list[ApplyOutcome], list[LiveTotal]]:
    """Every object's outcome, cuts first; after a partial apply, each planned flavor's live total."""
    from analytics.plan.output import apply_plan, live_totals
    from analytics.writers.order import partial
    from gpulens.core.kube_api import KubernetesClient, connection_from_kubeconfig

    connection = connection_from_kubeconfig(kubeconfig)
    with KubernetesClient(connection, timeout_s=timeout_s) as api:
        outcomes = apply_plan(objects, api, clock=lambda: datetime.now(UTC), say=typer.echo, plan=plan)
        return outcomes, live_totals(plan, api) if partial(outcomes) else []
