"""Which Kueue API version the cluster serves (``GET /apis/kueue.x-k8s.io``), for the inventory and the writers.

Kueue v0.20 serves only ``v1beta2`` (``v1beta1`` is gone). The version asked for is used when the cluster
serves it, else the newest served version gpulens reads (``v1beta2``, then ``v1beta1``). A cluster whose
group discovery does not answer (404) is not known to serve Kueue: readers then try the version asked
for and the others on 404, writers keep the version asked for (the objects' own 404s say the rest).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpulens.core.kube_api import KubernetesApiError, KubernetesReads
from gpulens.core.tenancy.api_objects import KUEUE_GROUP
from gpulens.core.tenancy.rules import KUEUE_API_VERSIONS


@dataclass(frozen=True)
class KueueApi:
    """The version to use, what discovery said was served, and the version that was asked for."""

    asked: str
    version: str | None
    """The version to read and write; None when discovery answered and serves none gpulens reads."""
    served: tuple[str, ...] | None
    """Versions the group serves (discovery); None when discovery did not answer."""
    unanswered: str = "not found"
    """Why discovery did not answer (when ``served`` is None)."""

    @property
    def statement(self) -> str:
        """One line for the run's output: which version was used and why."""
        if self.served is None:
            return (f"Kueue API: {KUEUE_GROUP} discovery did not answer ({self.unanswered}); using {self.asked} "
                    "(readers try the other versions on 404)")
        served = ", ".join(self.served) or "nothing"
        if self.version is None:
            return f"Kueue API: {KUEUE_GROUP} serves {served}, none gpulens reads: Kueue objects skipped"
        why = "" if self.version == self.asked else f"; {self.asked} asked for, not served"
        return f"Kueue API: {KUEUE_GROUP}/{self.version} (served: {served}{why})"

    def versions_to_try(self) -> tuple[str, ...]:
        """The versions a reader asks for, in order."""
        if self.served is None:
            return (self.asked, *(v for v in KUEUE_API_VERSIONS if v != self.asked))
        return (self.version,) if self.version else ()


def served_kueue(api: KubernetesReads, asked: str) -> KueueApi:
    """What ``GET /apis/kueue.x-k8s.io`` says; the version asked for when it is served, else the newest served."""
    try:
        group = api.get(f"/apis/{KUEUE_GROUP}")
    except KubernetesApiError as exc:
        return KueueApi(asked, None, None, "not found" if exc.status == 404 else exc.message)
    entries = group.get("versions") if isinstance(group, dict) else None
    served = tuple(str(e.get("version")) for e in entries or [] if isinstance(e, dict) and e.get("version"))
    readable = [v for v in KUEUE_API_VERSIONS if v in served]
    version = asked if asked in readable else (readable[0] if readable else None)
    return KueueApi(asked, version, served)


@dataclass(frozen=True)
class EffectiveQuotas:
    """``status.effectiveQuotas`` of a ClusterQueue (Kueue Dynamic Quota Orchestration): quotas a controller
    writes, which override ``spec.resourceGroups``."""

    orchestrator: str
    """The controller named by ``orchestratorRef`` (``Kind/name``)."""
    resource_groups: tuple[dict[str, Any], ...]
    """Its resource groups (``spec.resourceGroups``' shape); empty when it gives none."""


def effective_quotas(cluster_queue: Mapping[str, Any]) -> EffectiveQuotas | None:
    """The queue's ``status.effectiveQuotas`` when an ``orchestratorRef`` is set, else None."""
    status = cluster_queue.get("status")
    effective = status.get("effectiveQuotas") if isinstance(status, Mapping) else None
    ref = effective.get("orchestratorRef") if isinstance(effective, Mapping) else None
    if not ref or not isinstance(effective, Mapping):
        return None
    if isinstance(ref, Mapping):
        name = "/".join(str(ref[k]) for k in ("kind", "name") if ref.get(k)) or "an unnamed orchestrator"
    else:
        name = str(ref)
    groups = effective.get("resourceGroups")
    return EffectiveQuotas(name, tuple(g for g in groups if isinstance(g, dict)) if isinstance(groups, list) else ())
