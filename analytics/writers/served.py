"""Point every plan's target at the API version the cluster serves (before the first write), saying which."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from analytics.writers.base import QuotaTarget
from analytics.writers.plan import ObjectPlan
from gpulens.core.kube_api import KubernetesReads


def at_served_versions(api: KubernetesReads, plans: Sequence[ObjectPlan]) -> tuple[list[ObjectPlan], list[str]]:
    """The plans with each target at its served version (discovered once per target), and one line per
    target that had something to say (``Kueue API: kueue.x-k8s.io/v1beta2 (served: v1beta2; ...)``)."""
    bound: dict[int, QuotaTarget] = {}
    lines: list[str] = []
    for plan in plans:
        if id(plan.target) not in bound:
            target, line = plan.target.served(api)
            bound[id(plan.target)] = target
            lines += [line] if line else []
    return [dataclasses.replace(p, target=bound[id(p.target)]) for p in plans], lines
