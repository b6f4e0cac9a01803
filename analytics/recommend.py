"""Rightsizing and quota recommendations over a store: the API the CLI and the demo call.

``recommend(db_path, settings)`` reads the store, rightsizes every workload, recommends every quota
entry, proposes MIG conversions, plans the writes per quota object and records everything in the
``recommendations`` result table (with the window and parameters). ``write_dry_run`` writes the YAML
that ``--apply`` would send; ``apply_recommendations`` sends it through a ``KubernetesClient`` with guard rails,
cuts first and raises only where every cut of their flavor landed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
from pydantic import BaseModel, ConfigDict, Field

from analytics.facts import bind_facts
from analytics.placement.tas_advice import TasSettings
from analytics.placement.tas_evidence import TasEvidence, load_tas_advice
from analytics.placement.tas_output import render_topology, topology_rows
from analytics.plan.inputs import FleetCapacity, inventory_capacity
from analytics.quota import (
    MigConversion,
    QuotaEvidence,
    QuotaKey,
    QuotaRecommendation,
    QuotaSettings,
    load_quota_evidence,
    propose_mig_conversions,
    recommend_quota,
)
from analytics.quota_targets import QUOTA_TARGETS
from analytics.result_tables import ddl, insert_rows
from analytics.rightsizing.confidence import Confidence
from analytics.rightsizing.evidence import load_workload_usage, sample_step_seconds
from analytics.rightsizing.strategy import MigFitSettings, MigFitStrategy, WorkloadRecommendation
from analytics.writers import QuotaTarget
from analytics.writers.apply import OUTCOMES, ApplyOutcome, QuotaApplier
from analytics.writers.base import clear_dry_run_dir
from analytics.writers.crd import RecommendationPolicy
from analytics.writers.live_totals import LiveTotal, QueueRef, read_live_totals
from analytics.writers.order import apply_in_order, partial
from analytics.writers.plan import ObjectPlan, build_plans, dump_yaml
from analytics.writers.served import at_served_versions
from collector.queue_systems import VOLCANO_QUEUE, system_of
from collector.store_errors import StoreMissing, connect_store, reading_store
from gpulens.core.kube_api import KubernetesClient


class RecommendSettings(BaseModel):
    """Everything a recommendation run depends on (stored with its results)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window_days: float = Field(default=14.0, gt=0, description="Evidence window length (krr default: 14 days).")
    window_end: datetime | None = Field(default=None, description="End of the window; default: the store's latest sample.")
    targets: tuple[str, ...] = Field(default=("kueue", "resourcequota"), description="Quota object kinds to write.")
    kueue_version: str = Field(default="v1beta2", description="ClusterQueue API version: v1beta1 or v1beta2.")
    borrowing_limit_ratio: float | None = Field(default=None, ge=0, le=1000, allow_inf_nan=False,
                                                description="Set borrowingLimit = ratio x nominal.")
    lending_limit_ratio: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False,
                                              description="Set lendingLimit = ratio x nominal.")
    record_namespace: str = Field(default="gpulens", description="Namespace of GPUQuotaRecommendation objects.")
    rightsizing: MigFitSettings = MigFitSettings()
    quota: QuotaSettings = QuotaSettings()
    topology: TasSettings = TasSettings()
    store_results: bool = Field(default=True, description="Write the recommendations result table.")

    def policy(self, auto_apply: bool) -> RecommendationPolicy:
        return RecommendationPolicy(
            percentile=self.quota.percentile, headroom=self.quota.headroom, max_step=self.quota.max_step,
            min_confidence_days=self.quota.low_confidence_days, window_days=self.window_days, auto_apply=auto_apply,
        )

    def make_targets(self) -> dict[str, QuotaTarget]:
        """Instantiate the selected targets, keyed by the object kind they write."""
        options: dict[str, dict[str, Any]] = {
            "kueue": {
                "version": self.kueue_version, "borrowing_limit_ratio": self.borrowing_limit_ratio,
                "lending_limit_ratio": self.lending_limit_ratio,
            },
        }
        out = {}
        for name in self.targets:
            if name not in QUOTA_TARGETS.names():
                raise ValueError(f"unknown target {name!r} (known: {', '.join(sorted(QUOTA_TARGETS.names()))})")
            target = QUOTA_TARGETS.load(name)(**options.get(name, {}))
            out[target.object_kind] = target
        return out


@dataclass(frozen=True)
class RecommendationReport:
    """The outcome of one recommendation run; ``render()`` explains it in words."""

    run_id: str
    generated_at: datetime
    window_start: datetime
    window_end: datetime
    settings: RecommendSettings
    workloads: tuple[WorkloadRecommendation, ...]
    quotas: tuple[QuotaRecommendation, ...]
    conversions: tuple[MigConversion, ...]
    plans: tuple[ObjectPlan, ...]
    outcomes: tuple[ApplyOutcome, ...] = ()
    notes: tuple[str, ...] = ()
    data_span: tuple[datetime, datetime] | None = None
    """First and last time of the data actually used (the window may ask for more than the store holds)."""
    topology: TasEvidence | None = None
    """Kueue TAS advice per queue, from the newest analysis run's placements (None: no such run)."""
    live_totals: tuple[LiveTotal, ...] = ()
    """After a partial apply: each ClusterQueue flavor's live total, read back from the API server."""
    capacity: Mapping[tuple[str, str], int] = field(default_factory=dict)
    """Units per ClusterQueue flavor and resource on the flavor's nodes, drain candidates out (where known)."""

    @property
    def window(self) -> tuple[datetime, datetime]:
        return (self.window_start, self.window_end)

    def recommendation_objects(self, *, auto_apply: bool = False) -> list[dict[str, Any]]:
        """The GPUQuotaRecommendation objects of this run (dry-run state)."""
        policy = self.settings.policy(auto_apply)
        return [p.recommendation_object(policy, self.window, self.generated_at) for p in self.plans]

    def render(self) -> str:
        return "\n".join(_render(self))


def recommend(
    db_path: str | Path,
    settings: RecommendSettings | None = None,
    *,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    parquet_dir: Path | None = None,
) -> RecommendationReport:
    """Run rightsizing and quota recommendations over the store at ``db_path``.

    Facts are read through the ``f_*`` views (:func:`~analytics.facts.bind_facts`): from the store,
    or from the Parquet history under ``parquet_dir`` (``gpulens export-parquet``) where it has them.
    """
    settings = settings or RecommendSettings()
    path = Path(db_path)
    if not path.exists():
        raise StoreMissing(path)
    targets = settings.make_targets()
    con = connect_store(path, read_only=not settings.store_results)
    with con, reading_store(path):
        bind_facts(con, parquet_dir, temporary=True)
        end = settings.window_end or _latest_time(con)
        generated_at = clock().astimezone(UTC).replace(tzinfo=None)
        if end is None:
            return RecommendationReport("empty", generated_at, generated_at, generated_at, settings, (), (), (), (),
                                        notes=("the store holds no samples yet",))
        end = end.astimezone(UTC).replace(tzinfo=None) if end.tzinfo else end
        start = end - timedelta(days=settings.window_days)
        rs = settings.rightsizing
        usages = load_workload_usage(con, start, end, compute_percentile=rs.compute_percentile,
                                     memory_percentile=rs.memory_percentile)
        step = sample_step_seconds(con, start, end)
        strategy = MigFitStrategy(rs)
        workloads = tuple(strategy.run(u, step) for u in usages)
        evidence = load_quota_evidence(con, start, end, settings.quota)
        history = _history(con, start, end, settings.quota)
        fleet = _fleet_capacity(con, [e for e in evidence if e.key.object_kind in targets], start)
        quotas = tuple(
            _keep_missing_device(recommend_quota(e, settings.quota, history.get(e.key, e)), fleet)
            for e in evidence
            if e.key.object_kind in targets or e.key.object_kind in UNWRITTEN_KINDS
        )
        notes = (_target_notes(evidence, targets) + _unwritten_notes(quotas)
                 + tuple(fleet.flavor_nodes.notes() if fleet else ()))
        conversions = tuple(propose_mig_conversions(workloads, quotas))
        run_id = _run_id(start, end, settings)
        plans = tuple(build_plans(quotas, conversions, targets, record_namespace=settings.record_namespace,
                                  run_id=run_id))
        report = RecommendationReport(run_id, generated_at, start, end, settings, workloads, quotas, conversions,
                                      plans, notes=notes, data_span=_data_span(workloads, quotas),
                                      topology=load_tas_advice(con, settings.topology),
                                      capacity=_flavor_capacity(fleet))
        if settings.store_results:
            store_results(con, report, strategy.name)
    return report


def _fleet_capacity(
    con: duckdb.DuckDBPyConnection, evidence: Sequence[QuotaEvidence], start: datetime
) -> FleetCapacity | None:
    """Capacity of every ClusterQueue flavor, as ``gpulens plan`` counts it (None: no entry names a flavor)."""
    flavors = {e.key.flavor for e in evidence if e.key.flavor}
    return inventory_capacity(con, flavors, start, hours_per_month=730.0) if flavors else None


def _flavor_capacity(fleet: FleetCapacity | None) -> dict[tuple[str, str], int]:
    """Units of each ClusterQueue flavor and resource on its nodes (drain and warn lists out, no reserve):
    what the live totals after a partial apply are shown against."""
    return {key: pool.capacity for key, pool in fleet.pools.items() if pool.physical} if fleet else {}


def _keep_missing_device(q: QuotaRecommendation, fleet: FleetCapacity | None) -> QuotaRecommendation:
    """A raise for a device the flavor's nodes do not have is no raise: the quota is kept, and the reason said.
    A raise past what the flavor's healthy devices hold (drain and warn lists out, as ``gpulens plan`` counts
    capacity) stops at that capacity, never counting a device that is about to lose its work."""
    if q.action != "increase" or fleet is None:
        return q
    why = fleet.lacks(q.key.flavor, q.key.resource)
    if why is not None:
        return dataclasses.replace(q, action="hold", recommended=q.current, next_value=q.current,
                                   reasons=(*q.reasons, f"{why}: the quota stays at {q.current}"))
    pool = fleet.pools.get((q.key.flavor, q.key.resource))
    if pool is None or q.next_value is None or q.next_value <= pool.capacity:
        return q
    left_out = f", {pool.drained} on the drain or warn list left out" if pool.drained else ""
    line = f"capacity {pool.capacity} (of {pool.physical} units on the flavor's nodes{left_out})"
    if q.current is not None and q.current >= pool.capacity:
        return dataclasses.replace(q, action="hold", recommended=q.current, next_value=q.current,
                                   reasons=(*q.reasons, f"no raise past the flavor's {line}: the quota stays at "
                                                        f"{q.current}"))
    return dataclasses.replace(q, recommended=min(q.recommended or pool.capacity, pool.capacity),
                               next_value=pool.capacity,
                               reasons=(*q.reasons, f"raise capped at the flavor's {line}: next {pool.capacity}"))


def _history(
    con: duckdb.DuckDBPyConnection, start: datetime, end: datetime, quota: QuotaSettings
) -> dict[QuotaKey, QuotaEvidence]:
    """Every quota entry over all stored history up to ``quota.history_days`` (a cut must hold there too)."""
    longest = end - timedelta(days=quota.history_days)
    if longest >= start:
        return {}
    return {e.key: e for e in load_quota_evidence(con, longest, end, quota)}


UNWRITTEN_KINDS = (VOLCANO_QUEUE,)
"""Quota kinds recommended whatever ``--target`` says, and never written: gpulens has no writer for them."""


def _unwritten_notes(quotas: Sequence[QuotaRecommendation]) -> tuple[str, ...]:
    """Say which recommendations no writer applies."""
    kinds: dict[str, int] = {}
    for q in quotas:
        if q.key.object_kind in UNWRITTEN_KINDS:
            kinds[q.key.object_kind] = kinds.get(q.key.object_kind, 0) + 1
    return tuple(f"{n} {kind} entr{'y' if n == 1 else 'ies'} recommended, not written: gpulens has no "
                 f"{system_of(kind)} writer (apply them by hand)" for kind, n in sorted(kinds.items()))


def _target_notes(evidence: Sequence[QuotaEvidence], targets: Mapping[str, QuotaTarget]) -> tuple[str, ...]:
    """Say what the store holds when the selected targets match none of its quota objects."""
    chosen = [e for e in evidence if e.key.object_kind in targets]
    if chosen or not evidence:
        return ()
    kinds: dict[str, int] = {}
    for e in evidence:
        kinds[e.key.object_kind] = kinds.get(e.key.object_kind, 0) + 1
    held = ", ".join(f"{n} {kind} entr{'y' if n == 1 else 'ies'}" for kind, n in sorted(kinds.items()))
    flags = [f"--target {name}" for name in sorted(QUOTA_TARGETS.names())
             if getattr(QUOTA_TARGETS.load(name), "object_kind", None) in kinds]
    hint = f": use {' or '.join(flags)}" if flags else ""
    return (f"the store has no {' or '.join(sorted(targets))} objects in the window, so nothing is recommended "
            f"or written; it has {held}{hint}",)


def _data_span(
    workloads: Sequence[WorkloadRecommendation], quotas: Sequence[QuotaRecommendation]
) -> tuple[datetime, datetime] | None:
    """First and last time of the data the recommendations actually used."""
    firsts = [w.usage.first_seen for w in workloads] + [q.evidence.first_seen for q in quotas if q.evidence.buckets]
    lasts = [w.usage.last_seen for w in workloads] + [q.evidence.last_seen for q in quotas if q.evidence.buckets]
    return (min(firsts), max(lasts)) if firsts and lasts else None


def _latest_time(con: duckdb.DuckDBPyConnection) -> datetime | None:
    row = con.execute(
        "SELECT greatest((SELECT max(ts) FROM f_device_samples), (SELECT max(ts) FROM f_quota_snapshots))"
    ).fetchone()
    return row[0] if row else None


def _run_id(start: datetime, end: datetime, settings: RecommendSettings) -> str:
    blob = json.dumps([start.isoformat(), end.isoformat(), settings.model_dump(mode="json")], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def store_results(con: duckdb.DuckDBPyConnection, report: RecommendationReport, strategy: str) -> int:
    """Replace this run's rows in the ``recommendations`` result table; returns the row count."""
    con.execute(ddl("recommendations"))
    head = {"run_id": report.run_id, "generated_at": report.generated_at, "window_start": report.window_start,
            "window_end": report.window_end, "strategy": strategy, "parameters": report.settings.model_dump_json()}
    rows: list[dict[str, Any]] = []
    for w in report.workloads:
        u = w.usage
        evidence = {
            "compute_p95_ge": u.compute_p95_ge, "memory_p99_bytes": u.memory_p99_bytes,
            "memory_peak_bytes": u.memory_peak_bytes, "compute_need_ge": w.compute_need_ge,
            "memory_need_bytes": w.memory_need_bytes, "replicas": u.max_replicas,
            "activity_signal": list(u.activity_signals),
        }
        rows.append({
            **head, "scope": "workload", "tenant": u.tenant, "target_kind": u.kind, "target_namespace": u.namespace,
            "target_name": u.name, "flavor": "", "resource": "", "gpu_model": u.gpu_model,
            "current_profile": u.current_profile, "recommended_profile": w.recommended_profile,
            "current_value": u.devices_per_pod, "recommended_value": w.recommended_devices_per_pod,
            "next_value": None, "lower_bound": None, "upper_bound": None, "action": w.action,
            **_confidence(w.confidence), "evidence": json.dumps(evidence), "reasons": list(w.reasons),
        })
    for q in report.quotas:
        e = q.evidence
        evidence = {
            "usage_now": e.usage_now, "pending_now": e.pending_now, "pending_max": e.pending_max,
            "pending_buckets": e.pending_buckets, "demand_p_lower": e.demand_lower, "demand_p_target": e.demand_target,
            "demand_p_upper": e.demand_upper, "demand_max": e.demand_max, "uncapped_target": q.uncapped_target,
        }
        rows.append({
            **head, "scope": "quota", "tenant": e.tenant, "target_kind": q.key.object_kind,
            "target_namespace": q.key.namespace, "target_name": q.key.name, "flavor": q.key.flavor,
            "resource": q.key.resource, "gpu_model": None, "current_profile": None, "recommended_profile": None,
            "current_value": q.current, "recommended_value": q.recommended, "next_value": q.next_value,
            "lower_bound": q.lower_bound, "upper_bound": q.upper_bound, "action": q.action,
            **_confidence(q.confidence), "evidence": json.dumps(evidence), "reasons": list(q.reasons),
        })
    for c in report.conversions:
        kind, ns, name = c.queue.object_id if c.queue else ("Tenant", "", c.tenant)
        rows.append({
            **head, "scope": "mig_conversion", "tenant": c.tenant, "target_kind": kind, "target_namespace": ns,
            "target_name": name, "flavor": c.queue.flavor if c.queue else "", "resource": c.to_resource,
            "gpu_model": c.gpu_model, "current_profile": "gpu", "recommended_profile": c.profile,
            "current_value": c.whole_gpus, "recommended_value": c.mig_instances, "next_value": None,
            "lower_bound": None, "upper_bound": None, "action": "propose_mig", "confidence": None,
            "confidence_label": None, "history_days": None, "sample_count": None,
            "evidence": json.dumps({"gpus_needed": c.gpus_needed, "workloads": list(c.workloads)}),
            "reasons": list(c.reasons),
        })
    rows += topology_rows(report.topology, head)
    con.execute("BEGIN")
    try:
        con.execute("DELETE FROM recommendations WHERE run_id = ?", [report.run_id])
        insert_rows(con, "recommendations", rows)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    return len(rows)


def _confidence(confidence: Confidence) -> dict[str, Any]:
    """The confidence columns of a recommendations row."""
    return {"confidence": confidence.value, "confidence_label": confidence.label,
            "history_days": confidence.history_days, "sample_count": confidence.samples}


def _file_name(plan: ObjectPlan) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", plan.recommendation_name) + ".yaml"


DRY_RUN_HEADER = "# written by `gpulens recommend`"
"""First line of every file ``write_dry_run`` writes; only such files are replaced by the next run."""


def write_dry_run(report: RecommendationReport, out_dir: str | Path) -> list[Path]:
    """Write the apply body of every object with applicable changes, plus the recommendation objects.

    Files an earlier run wrote there (and only those) are removed first, so the directory holds
    exactly what this run would apply.
    """
    out = clear_dry_run_dir(out_dir, DRY_RUN_HEADER)
    header = f"{DRY_RUN_HEADER} (run {report.run_id}, {report.generated_at:%Y-%m-%dT%H:%M:%SZ})\n"
    written = []
    for plan in report.plans:
        if plan.writable:
            path = out / _file_name(plan)
            body = dump_yaml(plan.body(report.generated_at))
            path.write_text(header + plan.target.dry_run_note + body, encoding="utf-8")
            written.append(path)
    if report.plans:
        path = out / "gpuquotarecommendations.yaml"
        path.write_text(header + yaml_documents(report.recommendation_objects()), encoding="utf-8")
        written.append(path)
    return written


def yaml_documents(objects: Sequence[Mapping[str, Any]]) -> str:
    return "---\n".join(dump_yaml(dict(o)) for o in objects)


def apply_recommendations(
    report: RecommendationReport,
    api: KubernetesClient,
    *,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] | None = None,
    record: bool = True,
) -> RecommendationReport:
    """Apply every plan with the guard rails of ``QuotaApplier``, cuts first (``apply_in_order``); record
    GPUQuotaRecommendation objects; after a partial apply, read each ClusterQueue flavor's live total back."""
    kwargs: dict[str, Any] = {"clock": clock}
    if sleep is not None:
        kwargs["sleep"] = sleep
    applier = QuotaApplier(api, **kwargs)
    policy = report.settings.policy(auto_apply=True)
    plans, served = at_served_versions(api, report.plans)
    report = dataclasses.replace(report, plans=tuple(plans))
    outcomes, notes = [], [*report.notes, *served]
    # never raises for the API server's doing: a failure is an outcome
    for plan, outcome in zip(report.plans, apply_in_order(applier, report.plans), strict=True):
        if record:
            problem = applier.record(plan, outcome, policy, report.window)
            outcome = dataclasses.replace(outcome, recorded=problem is None, record_error=problem)
            if problem:
                notes.append(f"recording {plan.recommendation_name}: {problem}")
        outcomes.append(outcome)
    totals = tuple(read_live_totals(api, _flavor_members(report.plans), report.capacity)) if partial(outcomes) else ()
    return dataclasses.replace(report, outcomes=tuple(outcomes), notes=tuple(notes), live_totals=totals)


def _flavor_members(plans: Sequence[ObjectPlan]) -> dict[tuple[str, str], list[QueueRef]]:
    """Per ClusterQueue flavor and resource, every object of the run that has an entry for it."""
    members: dict[tuple[str, str], list[QueueRef]] = {}
    for plan in plans:
        for r in plan.recommendations:
            if r.key.flavor:
                members.setdefault((r.key.flavor, r.key.resource), []).append(
                    (plan.target, plan.namespace, plan.name))
    return members


def _used_window(r: RecommendationReport) -> str:
    """The data actually used, and the window asked for when it differs."""
    asked = f"{r.settings.window_days:g} days asked"
    if r.data_span is None:
        return f"{r.window_start:%Y-%m-%d %H:%M} .. {r.window_end:%Y-%m-%d %H:%M} UTC ({asked}, no data in it)"
    first, last = r.data_span
    days = (last - first).total_seconds() / 86_400
    return f"{first:%Y-%m-%d %H:%M} .. {last:%Y-%m-%d %H:%M} UTC ({days:.1f} days of data; {asked})"


def _render(r: RecommendationReport) -> list[str]:
    s = r.settings
    lines = [
        f"gpulens recommendations (run {r.run_id})",
        f"evidence window {_used_window(r)}; generated {r.generated_at:%Y-%m-%d %H:%M} UTC",
        f"policy: workloads {MigFitStrategy.name} (compute P{s.rightsizing.compute_percentile * 100:g}, memory "
        f"P{s.rightsizing.memory_percentile * 100:g} and peak, +{s.rightsizing.headroom:.0%}); quotas "
        f"P{s.quota.percentile * 100:g} of in-use + pending, +{s.quota.headroom:.0%}, step <= {s.quota.max_step:.0%}, "
        f"apply needs confidence >= {s.quota.low_confidence_days:g} days; a cut needs >= {s.quota.min_cut_days:g} days "
        f"of evidence and must hold over the stored history (up to {s.quota.history_days:g} days)",
    ]
    lines += [f"note: {n}" for n in r.notes]
    lines += ["", f"Workloads ({len(r.workloads)})"]
    for w in r.workloads:
        u = w.usage
        now = f"{u.current_profile} x{u.devices_per_pod}"
        to = "?" if w.recommended_profile is None else f"{w.recommended_profile} x{w.recommended_devices_per_pod}"
        lines.append(f"  {u.key} [{u.tenant}] {u.gpu_model}: {now} -> {to}  {w.action.upper()}")
        lines += [f"      - {reason}" for reason in w.reasons]
    lines += ["", f"Quotas ({len(r.quotas)} entries)"]
    for q in r.quotas:
        bounds = "" if q.lower_bound is None else f", bounds {q.lower_bound}..{q.upper_bound}"
        lines.append(
            f"  {q.key} [{q.evidence.tenant}]: {q.current} -> {q.next_value} "
            f"(recommended {q.recommended}{bounds})  {q.action.upper()}"
        )
        lines += [f"      - {reason}" for reason in q.reasons]
    if r.conversions:
        lines += ["", "MIG conversions proposed (not applied automatically: the MIG flavor must exist)"]
        for c in r.conversions:
            queue = f" in {c.queue.object_kind} {c.queue.name}" if c.queue else ""
            lines.append(f"  {c.tenant}{queue}: nvidia.com/gpu {c.whole_gpus} -> {c.to_resource} {c.mig_instances}")
            lines += [f"      - {reason}" for reason in c.reasons]
            lines += [f"      - workload {w}" for w in c.workloads]
    lines += render_topology(r.topology)
    lines += ["", "Changes per object" + ("" if r.outcomes else " (dry run)")]
    outcomes = {o.ref: o for o in r.outcomes}
    for plan in r.plans:
        if not plan.changes:
            lines.append(f"  {plan.ref}: no change")
            continue
        if plan.opted_out:
            lines.append(f"  {plan.ref}: would be skipped: annotated gpulens.io/auto-apply: \"false\"")
        managed = plan.managed_refusal()
        if managed and not r.outcomes:
            lines.append(f"  {plan.ref}: refused: {managed}")
        for q in plan.refused:
            lines.append(
                f"  {plan.ref} {q.key.flavor}/{q.key.resource}: refused, low confidence {q.confidence.value:.1f} days"
            )
        if plan.applicable:
            lines += ["    " + line for line in plan.diff(r.generated_at).splitlines()]
        if plan.ref in outcomes:
            o = outcomes[plan.ref]
            lines.append(f"  => {o.status.upper()}: {o.message}")
    if r.outcomes:
        lines += ["", *outcome_table(r.outcomes)]
    if r.live_totals:
        lines += ["", "Live totals after a partial apply (read back from the API server)"]
        lines += [f"  {t.line()}" for t in r.live_totals]
    return lines


def outcome_table(outcomes: Sequence[ApplyOutcome]) -> list[str]:
    """One row per object: outcome, whether its GPUQuotaRecommendation was recorded, and why."""
    counts = ", ".join(f"{sum(o.status == s for o in outcomes)} {s}" for s in OUTCOMES)
    width = max(len("object"), *(len(o.ref) for o in outcomes))
    rows = [f"Outcome per object ({counts})", f"  {'object':<{width}}  {'outcome':<9}  {'recorded':<8}  reason"]
    for o in outcomes:
        recorded = "-" if o.recorded is None else "yes" if o.recorded else "NO"
        reason = o.message if o.record_error is None else f"{o.message}; not recorded: {o.record_error}"
        rows.append(f"  {o.ref:<{width}}  {o.status:<9}  {recorded:<8}  {reason}")
    return rows
