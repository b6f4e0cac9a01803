"""Guarded server-side apply of quota plans, and recording of ``GPUQuotaRecommendation`` objects.

Per object: read it live; skip it when annotated ``gpulens.io/auto-apply: "false"``; refuse
low-confidence changes, entries whose live value moved away from the evidence, and cuts while the live
queue has pending workloads (or does not say); apply our fields with
``resourceVersion`` set (optimistic concurrency) and ``force=true`` (take over ``nominalQuota`` / ``hard``
from whoever created the object); on 409 read again and retry; a 403 is reported with the missing RBAC.
A write whose answer was lost (no answer in time, an answer that is not JSON) may have landed: the
object is read back, and it is ``applied`` only when the read shows the new values, else ``unknown``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from analytics.quota import QuotaRecommendation
from analytics.writers.base import EntryKey
from analytics.writers.crd import (
    CRD_KIND,
    RecommendationPolicy,
    recommendation_path,
)
from analytics.writers.plan import ObjectPlan, entry_label, opted_out
from gpulens.core.kube_api import (
    ConflictError,
    ForbiddenError,
    KubernetesApiError,
    KubernetesClient,
    MalformedAnswerError,
    NoAnswerError,
    NotFoundError,
)

OUTCOMES = ("applied", "unchanged", "skipped", "refused", "failed", "unknown")
"""Every status an object's apply can end in; ``unknown``: the write may have landed, nobody can say yet."""

CONDITION_REASONS = {"applied": "Applied", "unknown": "MayHaveBeenApplied"}
"""``Applied`` condition reason per status where it is not the status capitalised."""


@dataclass(frozen=True)
class ApplyOutcome:
    """What happened to one quota object."""

    ref: str
    status: str
    """One of ``OUTCOMES``."""
    message: str
    changes: tuple[tuple[str, float, int], ...] = ()
    """(flavor/resource, from, to) actually applied."""
    attempts: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    recorded: bool | None = None
    """Whether its GPUQuotaRecommendation was written (None: recording was not asked for)."""
    record_error: str | None = None

    @property
    def applied(self) -> bool:
        return self.status == "applied"

    def condition(self) -> tuple[bool | None, str, str]:
        """(status, reason, message) of the recorded ``Applied`` condition; a write that may have been applied is ``Unknown``."""
        status = None if self.status == "unknown" else self.applied
        return status, CONDITION_REASONS.get(self.status, self.status.capitalize()), self.message


def forbidden_message(exc: ForbiddenError, what: str) -> str:
    return (
        f"forbidden: the API server refused to {exc.method.lower()} {what} ({exc.path}): {exc.message}. "
        "Grant the rules in deploy/rbac/ to the identity gpulens runs as."
    )


class QuotaApplier:
    """Applies plans through a ``KubernetesClient`` with the guard rails above."""

    def __init__(
        self,
        api: KubernetesClient,
        *,
        clock: Callable[[], datetime],
        sleep: Callable[[float], None] = time.sleep,
        max_attempts: int = 5,
        backoff_s: float = 0.2,
    ) -> None:
        self.api = api
        self.clock = clock
        self.sleep = sleep
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s

    def apply(self, plan: ObjectPlan, only: Collection[EntryKey] | None = None) -> ApplyOutcome:
        """The outcome for one object (for its entries in ``only``, default all); never raises for what the
        API server or the live object does."""
        changes = [r for r in plan.changes if only is None or (r.key.flavor, r.key.resource) in only]
        if not changes:
            return ApplyOutcome(plan.ref, "unchanged", "no change recommended")
        notes = [
            f"{entry_label((r.key.flavor, r.key.resource))}: refused, low confidence "
            f"({r.confidence.value:.1f} days)"
            for r in changes if r.confidence.is_low
        ]
        applicable = [r for r in changes if not r.confidence.is_low]
        if not applicable:
            return ApplyOutcome(plan.ref, "refused", "; ".join(notes), notes=tuple(notes))
        path = plan.target.path(plan.namespace, plan.name)
        for attempt in range(1, self.max_attempts + 1):
            try:
                return self._attempt(plan, applicable, path, notes, attempt)
            except ConflictError:
                self.sleep(self.backoff_s * attempt)
            except NotFoundError:
                return ApplyOutcome(plan.ref, "failed", f"{plan.ref} not found ({path})", attempts=attempt)
            except ForbiddenError as exc:
                return ApplyOutcome(plan.ref, "failed", forbidden_message(exc, plan.ref), attempts=attempt)
            except KubernetesApiError as exc:
                return ApplyOutcome(plan.ref, "failed", str(exc), attempts=attempt)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                return ApplyOutcome(plan.ref, "failed", f"unexpected live object ({type(exc).__name__}: {exc})",
                                    attempts=attempt)
        return ApplyOutcome(plan.ref, "failed", f"conflict persisted after {self.max_attempts} attempts",
                            attempts=self.max_attempts)

    def _attempt(self, plan: ObjectPlan, applicable: list[QuotaRecommendation], path: str, notes: list[str],
                 attempt: int) -> ApplyOutcome:
        """Read the live object, check it, apply; a 409 (``ConflictError``) means read again."""
        live = self.api.get(path)
        meta = live.get("metadata", {})
        if opted_out(meta.get("annotations")):
            return ApplyOutcome(plan.ref, "skipped", "opted out: annotated gpulens.io/auto-apply: \"false\"",
                                attempts=attempt)
        managed = plan.managed_refusal(live)
        if managed:
            return ApplyOutcome(plan.ref, "refused", managed, attempts=attempt, notes=(managed,))
        live_values = plan.target.current_values(live)
        recs, drift = [], []
        for r in applicable:
            k = (r.key.flavor, r.key.resource)
            if k not in live_values:
                drift.append(f"{entry_label(k)}: not in the live object")
            elif r.current is not None and live_values[k] != r.current:
                drift.append(f"{entry_label(k)}: live value {live_values[k]:g} differs from the evidence "
                             f"({r.current}); re-run the recommendation")
            elif (why := plan.target.entry_refusal(live, k, int(r.next_value or 0))) is not None:
                drift.append(f"{entry_label(k)}: refused, {why}")
            else:
                recs.append(r)
        recs, held = self._hold_cuts_with_pending_work(plan, live, live_values, recs)
        refusals = notes + drift + held
        if not recs:
            return ApplyOutcome(plan.ref, "refused", "; ".join(refusals), attempts=attempt, notes=tuple(refusals))
        body = plan.body(self.clock(), live, recs, resource_version=meta.get("resourceVersion"))
        changes = tuple(
            (entry_label((r.key.flavor, r.key.resource)), live_values[(r.key.flavor, r.key.resource)],
             int(r.next_value or 0))
            for r in recs
        )
        try:
            self.api.apply(path, body, force=True)
        except (NoAnswerError, MalformedAnswerError) as exc:
            return self._read_back(plan, path, changes, exc, attempt, refusals)
        message = "; ".join([", ".join(f"{label} {old:g} -> {new}" for label, old, new in changes), *refusals])
        return ApplyOutcome(plan.ref, "applied", message, changes, attempt, tuple(refusals))

    def _read_back(
        self, plan: ObjectPlan, path: str, changes: tuple[tuple[str, float, int], ...], lost: KubernetesApiError,
        attempt: int, refusals: list[str],
    ) -> ApplyOutcome:
        """A write whose answer was lost: ``applied`` when the object now holds every new value, else
        ``unknown`` (the request may still land; nobody can say it did not)."""
        try:
            now = {entry_label(k): v for k, v in plan.target.current_values(self.api.get(path)).items()}
        except KubernetesApiError as exc:
            return ApplyOutcome(plan.ref, "unknown", f"{lost}; reading it back failed too ({exc.message})",
                                attempts=attempt, notes=tuple(refusals))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return ApplyOutcome(plan.ref, "unknown", f"{lost}; the object read back is unexpected ({exc})",
                                attempts=attempt, notes=tuple(refusals))
        if all(now.get(label) == new for label, _, new in changes):
            summary = ", ".join(f"{label} {old:g} -> {new}" for label, old, new in changes)
            why = lost.message.partition(";")[0]
            message = "; ".join([f"{summary} (the answer was lost: {why}; read back: applied)", *refusals])
            return ApplyOutcome(plan.ref, "applied", message, changes, attempt, tuple(refusals))
        held = ", ".join(f"{label} {now[label]:g}" if label in now else f"{label} absent" for label, _, _ in changes)
        return ApplyOutcome(plan.ref, "unknown", f"{lost}; read back: {held}, not the new value(s) yet, but the "
                            "request may still land: check the object before running again",
                            attempts=attempt, notes=tuple(refusals))

    @staticmethod
    def _hold_cuts_with_pending_work(
        plan: ObjectPlan, live: Mapping[str, Any], live_values: Mapping[EntryKey, float],
        recs: list[QuotaRecommendation],
    ) -> tuple[list[QuotaRecommendation], list[str]]:
        """Drop the cuts from ``recs`` when the live object has work pending now (or cannot say)."""
        if not plan.target.queues_work:
            return recs, []
        cuts = [r for r in recs if r.next_value is not None
                and r.next_value < live_values[(r.key.flavor, r.key.resource)]]
        if not cuts:
            return recs, []
        pending = plan.target.pending_workloads(live)
        if pending == 0:
            return recs, []
        target = plan.target
        why = (f"{pending} {target.pending_what} in the live {target.object_kind} now" if pending
               else f"the live {target.object_kind} reports no {target.pending_field} (pending work unknown)")
        held = [f"{entry_label((r.key.flavor, r.key.resource))}: cut refused, {why}" for r in cuts]
        return [r for r in recs if r not in cuts], held

    def record(
        self, plan: ObjectPlan, outcome: ApplyOutcome, policy: RecommendationPolicy,
        window: tuple[datetime, datetime],
    ) -> str | None:
        """Apply the ``GPUQuotaRecommendation`` for ``plan`` (spec, then status); an error message or None."""
        obj = plan.recommendation_object(policy, window, self.clock(), outcome.condition())
        name, ns = obj["metadata"]["name"], obj["metadata"]["namespace"]
        spec_body = {k: v for k, v in obj.items() if k != "status"}
        status_body = {"apiVersion": obj["apiVersion"], "kind": CRD_KIND, "metadata": {"name": name, "namespace": ns},
                       "status": obj["status"]}
        try:
            self.api.apply(recommendation_path(ns, name), spec_body, force=True)
            self.api.apply(recommendation_path(ns, name, status=True), status_body, force=True)
        except ForbiddenError as exc:
            return forbidden_message(exc, f"{CRD_KIND} {ns}/{name}")
        except KubernetesApiError as exc:
            return str(exc)
        return None
