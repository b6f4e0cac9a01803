"""Apply several quota objects so that no flavor goes over capacity: every cut first, raises only where all cuts landed.

A plan shares a flavor's capacity out between its queues: a raise is paid for by the cuts of the same
flavor and resource. So the cuts of every object are sent first; then each raise is sent only when
every cut of its flavor and resource landed. A cut that failed, may have been applied (no answer),
was refused or was skipped leaves the raises of its flavor refused, with the reason. An object with a
cut and a raise (in different flavors) is written twice, cuts first; its outcome is the two merged.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from analytics.quota import QuotaRecommendation
from analytics.writers.apply import OUTCOMES, ApplyOutcome, QuotaApplier
from analytics.writers.base import EntryKey
from analytics.writers.plan import ObjectPlan, entry_label

Pool = tuple[str, str, str]
"""(object kind, flavor, resource): the quotas that share one capacity."""

SEVERITY = ("failed", "unknown", "applied", "refused", "skipped", "unchanged")
"""The status of an object written in two parts is the first of its parts' statuses in this order."""

IN_WORDS = {"unknown": "may have been applied"}


def is_cut(r: QuotaRecommendation) -> bool:
    return r.current is not None and r.next_value is not None and r.next_value < r.current


def _key(r: QuotaRecommendation) -> EntryKey:
    return (r.key.flavor, r.key.resource)


def pool_of(plan: ObjectPlan, r: QuotaRecommendation) -> Pool:
    return (plan.target.object_kind, r.key.flavor, r.key.resource)


def apply_in_order(applier: QuotaApplier, plans: Sequence[ObjectPlan]) -> list[ApplyOutcome]:
    """One outcome per plan, in the plans' order; the writes go cuts first, then the raises that may go."""
    cut_outcomes: dict[int, ApplyOutcome] = {}
    missed: dict[Pool, list[str]] = defaultdict(list)
    """Per pool: the objects whose cut there did not land, with their outcome."""
    for i, plan in enumerate(plans):
        cuts = [r for r in plan.changes if is_cut(r)]
        if not cuts:
            continue
        outcome = cut_outcomes[i] = applier.apply(plan, only={_key(r) for r in cuts})
        landed = {label for label, _, _ in outcome.changes}
        for r in cuts:
            if entry_label(_key(r)) not in landed:
                missed[pool_of(plan, r)].append(f"{plan.ref} ({IN_WORDS.get(outcome.status, outcome.status)})")
    outcomes = []
    for i, plan in enumerate(plans):
        cut = cut_outcomes.get(i)
        raises = [r for r in plan.changes if not is_cut(r)]
        if cut is not None and (cut.status == "skipped" or not raises):
            outcomes.append(cut)  # opted out: nothing more is sent to it
            continue
        if not raises:
            outcomes.append(applier.apply(plan))  # nothing to change: "unchanged", without a request
            continue
        raised = _raise(applier, plan, raises, missed)
        outcomes.append(raised if cut is None else merge([cut, raised]))
    return outcomes


def _raise(applier: QuotaApplier, plan: ObjectPlan, raises: list[QuotaRecommendation],
           missed: dict[Pool, list[str]]) -> ApplyOutcome:
    """Apply the raises of ``plan`` whose pool lost no cut; refuse the others, saying which cut did not land
    (a low-confidence raise is refused for that reason, as ever)."""
    gated = [r for r in raises if pool_of(plan, r) in missed and not r.confidence.is_low]
    held = [
        f"{entry_label(_key(r))}: raise refused: the cut of {', '.join(missed[pool_of(plan, r)])} in this flavor "
        "did not land, and a raise could put the flavor over capacity"
        for r in gated
    ]
    free = {_key(r) for r in raises if r not in gated}
    if not free:
        return ApplyOutcome(plan.ref, "refused", "; ".join(held), notes=tuple(held))
    outcome = applier.apply(plan, only=free)
    if not held:
        return outcome
    return merge([outcome, ApplyOutcome(plan.ref, "refused", "; ".join(held), notes=tuple(held))])


def merge(parts: Sequence[ApplyOutcome]) -> ApplyOutcome:
    """One object's outcome from the outcomes of its writes: the most severe status, every message and change."""
    first = parts[0]
    status = min((p.status for p in parts), key=SEVERITY.index)
    message = "; ".join(dict.fromkeys(p.message for p in parts if p.message))
    return ApplyOutcome(
        first.ref, status, message, tuple(c for p in parts for c in p.changes), sum(p.attempts for p in parts),
        tuple(dict.fromkeys(n for p in parts for n in p.notes)),
    )


def partial(outcomes: Sequence[ApplyOutcome]) -> bool:
    """True when some change asked for did not land (or may not have): the live totals are worth reading back."""
    return any(o.status not in ("applied", "unchanged") or o.notes for o in outcomes)


def closing_line(outcomes: Sequence[ApplyOutcome]) -> str:
    """``apply: 2 applied, 0 unchanged, ...`` over every status, for the end of a run."""
    return "apply: " + ", ".join(f"{sum(o.status == s for o in outcomes)} {s}" for s in OUTCOMES)


def unsettled_line(outcomes: Sequence[ApplyOutcome]) -> str | None:
    """One line when an object failed or may have been applied (the run must exit non-zero), else None."""
    failed = [o for o in outcomes if o.status == "failed"]
    unknown = [o for o in outcomes if o.status == "unknown"]
    if not failed and not unknown:
        return None
    n = len(outcomes)
    if not unknown:
        what = "failed"
    elif not failed:
        what = "may have been applied (no usable answer: check before running again)"
    else:
        what = f"failed or may have been applied ({len(failed)} failed, {len(unknown)} without a usable answer)"
    first = (failed or unknown)[0]
    return f"{len(failed) + len(unknown)} of {n} object(s) {what}; first: {first.ref}: {first.message}"
