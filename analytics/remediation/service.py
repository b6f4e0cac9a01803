"""The alert-driven remediation service: each webhook (or resync) decides with ``gpulens remediate``'s policy.

Per evaluation: the latest health run from the store, the firing alerts on top (:mod:`alert_inputs`),
then the very decisions and writes of ``gpulens remediate`` (dry run, or ``--apply``: live Nodes,
DeviceTaintRules and ResourceSlices first, every guard rail, one outcome per node). Evaluations are
serialised by one lock, so the caps count every earlier quarantine. Idempotent: a repeated or regrouped
alert changes no alert state, and a decision that leaves a node where it stands (quarantined, released,
held, refused for the same rail) is neither written to the cluster again nor recorded again. The
cluster is the state: after a restart the live taints say what is quarantined, and Alertmanager sends
the firing alerts again within its repeat interval.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import duckdb

from analytics.remediation.alert_inputs import with_alerts
from analytics.remediation.alerts import GpuAlert, Webhook
from analytics.remediation.apply import NodeOutcome
from analytics.remediation.decide import Decision, breakers
from analytics.remediation.plan import load_inputs
from analytics.remediation.policy import RemediationPolicy
from analytics.remediation.record import outcome_columns, record_columns
from analytics.remediation.run import RemediationReport, apply_inputs, plan_inputs
from analytics.remediation.service_metrics import ServiceMetrics
from gpulens.core.errors import UserError
from gpulens.core.kube_api import KubernetesClient

ApiFactory = Callable[[], AbstractContextManager[KubernetesClient]]
_DONE = ("applied", "unchanged")


class AlertBook:
    """The alerts received, by fingerprint: which fire now, and when each node's last one ended.

    A firing alert that Alertmanager has not sent again within ``ttl`` (its resolved notice was lost, say)
    counts as ended when it was last seen."""

    def __init__(self, ttl_seconds: float) -> None:
        self.ttl = timedelta(seconds=ttl_seconds)
        self._firing: dict[str, tuple[GpuAlert, datetime]] = {}
        self.resolved: dict[str, datetime] = {}

    def take(self, alerts: tuple[GpuAlert, ...], now: datetime) -> None:
        for a in alerts:
            if a.firing and (a.ends_at is None or a.ends_at > now):
                self._firing[a.fingerprint] = (a, now)
            elif self._firing.pop(a.fingerprint, None) is not None or a.node not in self.resolved:
                self._ended(a.node, min(a.ends_at or now, now))

    def firing(self, now: datetime) -> list[GpuAlert]:
        for fp, (a, seen) in list(self._firing.items()):
            if now - seen > self.ttl:
                del self._firing[fp]
                self._ended(a.node, seen)
        return [a for a, _ in self._firing.values()]

    def _ended(self, node: str, when: datetime) -> None:
        self.resolved[node] = max(self.resolved.get(node, when), when)


@dataclass(frozen=True)
class Evaluation:
    """What one webhook or resync led to: the report, the decisions that changed something, the problems."""

    trigger: str
    report: RemediationReport | None = None
    changed: tuple[Decision, ...] = ()
    unknown: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    error: str = ""

    def lines(self) -> list[str]:
        if self.error:
            return [f"{self.trigger}: not evaluated: {self.error}"]
        outcomes = {o.node: o for o in self.report.outcomes} if self.report else {}
        out = [f"{self.trigger}: {d.action} {d.node} ({d.flavor}): {d.reason}"
               + (f" -> {outcomes[d.node].status}: {outcomes[d.node].message}" if d.node in outcomes else "")
               for d in self.changed]
        out += [f"{self.trigger}: ignored: node {n} is not in the health run (no flavor known): no decision"
                for n in self.unknown]
        out += [f"{self.trigger}: ignored: {why}" for why in self.ignored]
        return out

    def as_json(self) -> dict[str, object]:
        return {"trigger": self.trigger, "error": self.error or None, "lines": self.lines(),
                "run": self.report.inputs.run_id if self.report else None,
                "applied": bool(self.report and self.report.applied)}


@dataclass
class RemediationService:
    """Decides on alerts; ``api`` opens a client per evaluation for ``--apply`` (None: dry run).

    ``db`` gives the health run; the decisions go to ``record_db`` (default: ``db``). A separate record
    store lets the service read a published copy of the store while the analytics jobs own the original
    (DuckDB takes one writer per file, and refuses it while another process has the file open)."""

    db: Path
    policy: RemediationPolicy
    clock: Callable[[], datetime]
    api: ApiFactory | None = None
    record_db: Path | None = None
    alert_ttl_seconds: float = 3600.0
    metrics: ServiceMetrics = field(default_factory=ServiceMetrics)
    sleep: Callable[[float], None] | None = None
    book: AlertBook = field(init=False)
    _standing: dict[str, tuple[str, ...]] = field(init=False, default_factory=dict)
    _pending: list[dict[str, list[object]]] = field(init=False, default_factory=list)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.book = AlertBook(self.alert_ttl_seconds)
        if self.record_db is not None and not self.record_db.exists():
            try:
                duckdb.connect(str(self.record_db)).close()
            except duckdb.Error as exc:
                raise UserError(f"--record-db {self.record_db}: cannot create it: {exc}") from exc

    def receive(self, webhook: Webhook) -> Evaluation:
        """Take the webhook's alerts and decide (``error`` set when the store or cluster cannot be read)."""
        with self._lock:
            self.book.take(webhook.alerts, self.clock())
            ev = self._evaluate(f"webhook {webhook.group_key or '(no group key)'}")
        return replace(ev, ignored=webhook.ignored)

    def resync(self) -> Evaluation:
        """Decide again without a new alert: releases after the healthy period, expired alerts, retries."""
        with self._lock:
            return self._evaluate("resync")

    def _evaluate(self, trigger: str) -> Evaluation:
        now = self.clock()
        firing = self.book.firing(now)
        self.metrics.firing.set(len(firing))
        try:
            made = with_alerts(load_inputs(self.db), firing, self.book.resolved, now)
            if self.api is None:
                report = plan_inputs(made.inputs, self.policy, now)
            else:
                with self.api() as client:
                    report = apply_inputs(made.inputs, self.policy, client, self.clock, self.sleep)
        except UserError as exc:
            self.metrics.last_failure.set(1)
            return Evaluation(trigger, error=str(exc))
        self.metrics.last_failure.set(0)
        self.metrics.last_evaluation.set((now - datetime(1970, 1, 1)).total_seconds())
        changed = self._changed(report)
        self._observe(report, changed, firing, now)
        self._record(report, changed, now)
        return Evaluation(trigger, report, changed, made.unknown)

    def _changed(self, report: RemediationReport) -> tuple[Decision, ...]:
        """The decisions that move a node to a new standing (the rest repeat what was decided before)."""
        outcomes = {o.node: o for o in report.outcomes}
        standing = {d.node: _standing(d, outcomes.get(d.node)) for d in report.decisions}
        changed = tuple(d for d in report.decisions if self._standing.get(d.node) != standing[d.node])
        self._standing = standing
        return changed

    def _observe(self, report: RemediationReport, changed: tuple[Decision, ...], firing: list[GpuAlert],
                 now: datetime) -> None:
        outcomes = {o.node: o for o in report.outcomes}
        starts: dict[str, datetime] = {}
        for a in firing:
            starts[a.node] = min(starts.get(a.node, a.starts_at), a.starts_at)
        for d in changed:
            o = outcomes.get(d.node)
            status = o.status if o else "dry-run"
            self.metrics.decisions.labels(d.action, status).inc()
            if d.action == "taint" and status in ("applied", "dry-run") and d.node in starts:
                self.metrics.alert_to_action.labels(d.action).observe(max(0.0, (now - starts[d.node]).total_seconds()))
        for b in breakers(list(report.inputs.cases), self.policy, report.inputs.window[1]):
            self.metrics.breaker.labels(b.flavor).set(1 if b.tripped else 0)

    def _record(self, report: RemediationReport, changed: tuple[Decision, ...], now: datetime) -> None:
        """Append the changed decisions to ``remediation_outcomes`` (kept and retried while the store is busy)."""
        if changed:
            nodes = {d.node for d in changed}
            self._pending.append(outcome_columns(
                replace(report, decisions=changed, outcomes=tuple(o for o in report.outcomes if o.node in nodes)),
                now))
        if not self._pending:
            self.metrics.unrecorded.set(0)
            return
        merged = {name: [v for cols in self._pending for v in cols[name]] for name in self._pending[0]}
        try:
            record_columns(self.record_db or self.db, merged)
        except UserError:
            self.metrics.unrecorded.set(len(merged["node"]))
            return
        self._pending.clear()
        self.metrics.unrecorded.set(0)


def _standing(d: Decision, o: NodeOutcome | None) -> tuple[str, ...]:
    """Where a decision leaves its node: quarantined, released, or the rail that stopped it."""
    if d.action in ("taint", "keep") and (o is None or o.status in _DONE):
        return ("quarantined",)
    if d.action == "untaint" and (o is None or o.status in _DONE):
        return ("released",)
    return (d.action, o.status if o else "", d.reason.split(":")[0])
