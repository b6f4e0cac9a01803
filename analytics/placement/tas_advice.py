"""Per-queue Kueue topology-aware scheduling (TAS) advice, as pure functions of observed placements.

Input: each multi-GPU workload of a queue with its spread per cross-node level (``node``, ``rack``,
``block``, ``zone``: the rows of the ``placement`` table) and the node label each level uses in the
fleet. Output per queue: the level to ask for and whether to *require* it
(``kueue.x-k8s.io/podset-required-topology``: admitted only when one domain has room) or *prefer* it
(``kueue.x-k8s.io/podset-preferred-topology``: tightest domain with room, spread if none), or *hold*.

Rules (``docs/recommendations.md``):

* the level is the innermost cross-node level at which **every** job of the queue fits one domain
  (``min_domains == 1``, given the fleet's shapes); a level not measured for some job is not eligible;
* nothing placed worse than needed at a cross-node level in the window: ``hold`` (no evidence, no change);
* some job never fits one domain of any level: ``prefer`` the innermost level where a job was spread
  wider than needed (required would never admit that job);
* else ``require`` when the GE-hours held in worse placements are at least ``require_share`` of the
  queue's multi-GPU GE-hours, ``prefer`` below that (a rare spread is not worth jobs waiting for a domain).

NUMA and NVLink sit inside a node, where TAS does not look: spread there is named in the reasons
(kubelet Topology Manager / DRA alignment), never turned into a TAS level.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

CROSS_NODE = ("node", "rack", "block", "zone")
"""TAS levels, innermost first (Kueue levels are node labels: nothing inside a node)."""
INTRA_NODE = ("nvlink", "numa")
HOSTNAME_LABEL = "kubernetes.io/hostname"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"


class TasSettings(BaseModel):
    """How strong the evidence must be before the advice turns from preferred into required."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    require_share: float = Field(
        default=0.25, ge=0, le=1,
        description="Share of the queue's multi-GPU GE-hours held spread wider than needed above which the "
                    "level is required rather than preferred.",
    )


@dataclass(frozen=True)
class LevelFigures:
    """One level of one workload's placement held longest (a ``placement`` row)."""

    domains_spanned: int
    min_domains: int
    ge_hours_affected: float
    domains: tuple[str, ...] = ()

    @property
    def worse(self) -> bool:
        return self.domains_spanned > self.min_domains


@dataclass(frozen=True)
class WorkloadSpread:
    """A multi-GPU workload of a queue and its spread per measured level."""

    tenant: str
    namespace: str
    kind: str
    name: str
    gpu_model: str
    pods: int
    devices: int
    ge_hours: float
    levels: Mapping[str, LevelFigures]

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"

    def affected_across_nodes(self) -> float:
        """GE-hours held spread wider than needed at some cross-node level (the widest level's figure)."""
        return max((self.levels[lv].ge_hours_affected for lv in CROSS_NODE if lv in self.levels), default=0.0)


@dataclass(frozen=True)
class Consolidation:
    """What moving a spread workload out of its smallest share of a domain would free (at the window's end)."""

    workload: str
    level: str
    vacate: str
    into: str
    gpus_moved: int
    others_in_vacated: int
    """GPUs of the vacated domain held by other workloads at that time (0: the whole domain is freed)."""
    nodes_freed: tuple[str, ...]
    free_in_target: int

    @property
    def frees_whole_domain(self) -> bool:
        return self.others_in_vacated == 0

    @property
    def fits_now(self) -> bool:
        return self.free_in_target >= self.gpus_moved

    def sentence(self) -> str:
        freed = (f"frees the whole {self.level} {self.vacate}" if self.frees_whole_domain else
                 f"frees {self.gpus_moved} GPU(s) of {self.level} {self.vacate}, which stays in use "
                 f"({self.others_in_vacated} GPU(s) held by others)")
        nodes = f"; whole node(s) freed: {', '.join(self.nodes_freed)}" if self.nodes_freed else ""
        room = ("it has room now" if self.fits_now else
                f"it has {self.free_in_target} free GPU(s) now, {self.gpus_moved} needed: first move what holds them")
        return f"consolidating {self.workload} into {self.into} {freed}{nodes}; {room}"


@dataclass(frozen=True)
class QueueAdvice:
    """The TAS advice for one queue."""

    queue_kind: str
    queue_namespace: str
    queue_name: str
    tenant: str
    action: str
    """``require``, ``prefer`` or ``hold``."""
    level: str | None
    label: str | None
    worse_share: float
    workloads: tuple[WorkloadSpread, ...]
    reasons: tuple[str, ...]
    consolidations: tuple[Consolidation, ...] = field(default=())

    @property
    def annotation(self) -> str | None:
        return {"require": REQUIRED, "prefer": PREFERRED}.get(self.action)

    @property
    def ref(self) -> str:
        ns = f"{self.queue_namespace}/" if self.queue_namespace else ""
        return f"{self.queue_kind} {ns}{self.queue_name}"

    def evidence(self) -> dict[str, object]:
        return {
            "annotation": self.annotation, "level": self.level, "label": self.label,
            "worse_share": round(self.worse_share, 4),
            "workloads": [
                {"workload": w.ref, "gpu_model": w.gpu_model, "pods": w.pods, "devices": w.devices,
                 "ge_hours": round(w.ge_hours, 3),
                 "levels": {lv: [f.domains_spanned, f.min_domains] for lv, f in w.levels.items()}}
                for w in self.workloads
            ],
            "consolidations": [
                {"workload": c.workload, "level": c.level, "vacate": c.vacate, "into": c.into,
                 "gpus_moved": c.gpus_moved, "frees_whole_domain": c.frees_whole_domain,
                 "nodes_freed": list(c.nodes_freed), "free_in_target": c.free_in_target}
                for c in self.consolidations
            ],
        }


def fitting_level(workloads: Sequence[WorkloadSpread], labels: Mapping[str, str | None]) -> str | None:
    """Innermost cross-node level with a node label at which every job fits one domain; None if none."""
    for level in CROSS_NODE:
        if labels.get(level) is None:
            continue
        if all(level in w.levels and w.levels[level].min_domains == 1 for w in workloads):
            return level
    return None


def advise_queue(
    queue: tuple[str, str, str], tenant: str, workloads: Sequence[WorkloadSpread],
    labels: Mapping[str, str | None], settings: TasSettings,
    consolidations: Sequence[Consolidation] = (),
) -> QueueAdvice:
    """The advice for one queue's multi-GPU workloads (``labels``: level -> node label, None if the fleet has none)."""
    kind, ns, name = queue
    total = sum(w.ge_hours for w in workloads)
    affected = sum(w.affected_across_nodes() for w in workloads)
    share = affected / total if total > 0 else 0.0
    worse = [w for w in workloads if any(w.levels[lv].worse for lv in CROSS_NODE if lv in w.levels)]
    level = fitting_level(workloads, labels)
    reasons: list[str] = []
    largest = max(workloads, key=lambda w: w.devices)
    for w in worse:
        lv = next(lv for lv in reversed(CROSS_NODE) if lv in w.levels and w.levels[lv].worse)
        f = w.levels[lv]
        reasons.append(f"{w.ref} ({w.devices} GPUs, {w.pods} pods) spanned {f.domains_spanned} {lv} domains where "
                       f"{f.min_domains} could hold it ({f.ge_hours_affected:,.1f} GE-h)")
    if not worse:
        action, chosen = "hold", level
        where = f"; if that changes, ask for {labels.get(level)}" if level else ""
        reasons.insert(0, f"every multi-GPU job of the queue sat in as few node/rack/block domains as its size "
                          f"allows: no evidence for a change{where}")
    elif level is None:
        chosen = next((lv for lv in CROSS_NODE if labels.get(lv) and any(
            lv in w.levels and w.levels[lv].worse for w in workloads)), None)
        action = "prefer" if chosen else "hold"
        reasons.insert(0, f"its largest job ({largest.ref}, {largest.devices} GPUs) fits no single domain of any "
                          f"level: required would never admit it, preferred keeps jobs as tight as the fleet allows")
    else:
        chosen = level
        action = "require" if share >= settings.require_share else "prefer"
        why = (f"{share:.0%} of the queue's multi-GPU GE-hours ran spread wider than needed (>= "
               f"{settings.require_share:.0%})" if action == "require" else
               f"only {share:.0%} of its multi-GPU GE-hours ran spread wider than needed (< "
               f"{settings.require_share:.0%}): prefer, so no job waits for a free domain")
        reasons.insert(0, f"every job of the queue (largest {largest.devices} GPUs) fits one {level} domain "
                          f"({labels.get(level)}); {why}")
        if action == "require":
            reasons.append(f"required: Kueue admits a job only when one {level} domain has room for all its pods; "
                           f"the ResourceFlavor's Topology must list {labels.get(level)} as a level")
    for w in workloads:
        inside = [lv for lv in INTRA_NODE if lv in w.levels and w.levels[lv].worse]
        if inside:
            reasons.append(f"{w.ref} straddles {' and '.join(inside)} domains inside a node: TAS does not see inside "
                           "a node; align GPUs with kubelet's Topology Manager (single-numa-node) or DRA")
    reasons += [c.sentence() for c in consolidations]
    return QueueAdvice(kind, ns, name, tenant, action, chosen, labels.get(chosen) if chosen else None, share,
                       tuple(workloads), tuple(reasons), tuple(consolidations))
