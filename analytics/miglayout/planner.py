"""The MIG layout planner: a deterministic packing of recommended MIG instances onto GPUs that can change.

Rules, in order (docs/recommendations.md, "MIG layout plan"):

1. An instance goes first to a free MIG instance of the same model and profile that already exists
   (nothing to repartition).
2. The rest are packed first-fit decreasing (largest instances first) into GPU layouts that are valid
   for the model at the placement level: each profile at a start slice the driver allows, no overlap
   (:func:`gpulens.core.mig_catalog.place_layout`). Each layout is then filled up with more of
   its most common profile, so a repartitioned GPU has no unusable gap.
3. Layouts go to GPUs that may change: GPUs in MIG mode held by nobody or only by workloads that move,
   then whole GPUs held only by workloads that move (they give them back). Nodes already in MIG mode come first, then the nodes
   with the most such GPUs (few nodes changed), then by name; identical layouts go to neighbouring GPUs
   so a node's GPUs stay uniform where they can. GPUs held by anything else are never touched: the
   whole-GPU demand stays whole. A GPU on the newest health run's drain or warn list (or on a listed
   node) is never repartitioned nor reused: it is about to lose its work.
4. A workload moves whole or not at all: when any of its instances finds no GPU, all of them are listed
   as not fitting, with the reason, and the others are planned without it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from analytics.miglayout.fleet import GpuState, InstanceDemand
from gpulens.core.mig_catalog import GpuModel, model_by_name, place_layout


@dataclass(frozen=True)
class GpuChange:
    """One GPU whose MIG layout the plan changes."""

    gpu: GpuState
    layout: tuple[str, ...]
    """The new GPU-instance profiles, sorted by placement."""
    placements: tuple[tuple[str, int], ...]
    """``(profile, start memory slice)`` for every instance of ``layout``."""
    serves: tuple[tuple[str, str], ...]
    """``(workload, profile)`` for each instance a recommended workload will use; the rest are spare."""
    shared: bool = False
    """In a tenant's view: the change also serves or frees another tenant's workload (decided fleet-wide)."""

    @property
    def spare(self) -> int:
        return len(self.layout) - len(self.serves)


@dataclass(frozen=True)
class Reuse:
    """A recommended instance served by an existing free MIG instance."""

    workload: str
    profile: str
    node: str
    device_id: str


@dataclass(frozen=True)
class Unplaced:
    """Instances of one workload that the plan could not place, and why."""

    workload: str
    model: str
    profile: str
    count: int
    reason: str


@dataclass(frozen=True)
class LayoutPlan:
    """The whole plan: changed GPUs, reused instances, what does not fit, and what it frees."""

    gpus: tuple[GpuState, ...]
    demands: tuple[InstanceDemand, ...]
    changes: tuple[GpuChange, ...]
    reused: tuple[Reuse, ...]
    unplaced: tuple[Unplaced, ...]

    @property
    def nodes_changed(self) -> tuple[str, ...]:
        return tuple(sorted({c.gpu.node for c in self.changes}))

    @property
    def whole_gpus_freed(self) -> int:
        """Whole GPUs the converting workloads give back and no new layout takes."""
        changed = {c.gpu.gpu_uuid for c in self.changes}
        converting = {d.workload for d in self.demands if d.workload not in self.unplaced_workloads}
        return sum(
            1 for g in self.gpus
            if not g.mig_enabled and g.holders and g.holders <= converting and g.gpu_uuid not in changed
        )

    @property
    def pending_moves(self) -> tuple[InstanceDemand, ...]:
        """Placed workloads whose new profile already has pending work in their queue."""
        return tuple(d for d in self.demands if d.pending and d.workload not in self.unplaced_workloads)

    @property
    def unplaced_workloads(self) -> frozenset[str]:
        return frozenset(u.workload for u in self.unplaced)

    @property
    def gpu_equivalents_freed(self) -> float:
        """GE the converting workloads hold today minus the GE of the instances they will hold."""
        total = 0.0
        for d in self.demands:
            if d.workload in self.unplaced_workloads:
                continue
            total += d.current_ge - d.count * model_by_name(d.model).profile(d.profile).gpu_equivalents
        return total


def plan_layout(gpus: Sequence[GpuState], demands: Sequence[InstanceDemand]) -> LayoutPlan:
    """Place every demanded instance exactly once, or list it as not fitting (see the module docstring)."""
    changes: list[GpuChange] = []
    reused: list[Reuse] = []
    unplaced: list[Unplaced] = []
    by_model: dict[str, list[InstanceDemand]] = defaultdict(list)
    for d in demands:
        by_model[d.model].append(d)
    for model_name in sorted(by_model):
        model_demands = by_model[model_name]
        try:
            model = model_by_name(model_name)
        except ValueError:
            unplaced += [Unplaced(d.workload, d.model, d.profile, d.count, f"{d.model} has no MIG catalog")
                         for d in model_demands]
            continue
        bad = [d for d in model_demands if not _has_profile(model, d.profile)]
        unplaced += [Unplaced(d.workload, d.model, d.profile, d.count, f"{d.model} has no MIG profile {d.profile}")
                     for d in bad]
        model_gpus = [g for g in gpus if g.model == model.short_name or g.model == model.name]
        model_changes, model_reused, model_unplaced = _plan_model(
            model, [d for d in model_demands if d not in bad], model_gpus)
        changes += model_changes
        reused += model_reused
        unplaced += model_unplaced
    unplaced.sort(key=lambda u: (u.workload, u.model, u.profile))
    return LayoutPlan(tuple(gpus), tuple(demands), tuple(changes), tuple(reused), tuple(unplaced))


def _plan_model(
    model: GpuModel, demands: list[InstanceDemand], gpus: list[GpuState]
) -> tuple[list[GpuChange], list[Reuse], list[Unplaced]]:
    """One model's plan. A workload moves whole or not at all: when some of its instances find no GPU, all of
    them are listed as not fitting and the rest is planned again without it (its pods never straddle shapes)."""
    healthy = [g for g in gpus if g.health is None]
    unhealthy = len(gpus) - len(healthy)
    left_out: list[InstanceDemand] = []
    while True:
        placing = [d for d in demands if d not in left_out]
        wanted, model_reused = _reuse_free_instances(_instances(placing, model), healthy)
        used_gpus = {g.gpu_uuid for g in healthy if any(r.device_id in dict(g.free_instances) for r in model_reused)}
        candidates = _candidates(healthy, {d.workload for d in placing}, used_gpus)
        bins = _pack(model, wanted)
        short = {w for _, _, serves in bins[len(candidates):] for w, _ in serves}
        if not short:
            break
        left_out += [d for d in placing if d.workload in short]
    changes = [GpuChange(gpu, layout, placements, serves)
               for gpu, (layout, placements, serves) in zip(candidates, bins, strict=False)]
    why = f"no {model.short_name} GPU is free to repartition for all of its instances (held by other workloads"
    why += f"; {unhealthy} on the drain or warn list left out)" if unhealthy else ")"
    return changes, model_reused, [Unplaced(d.workload, model.short_name, d.profile, d.count, why) for d in left_out]


def _has_profile(model: GpuModel, profile: str) -> bool:
    return any(p.name == profile for p in model.mig_profiles)


def _instances(demands: Iterable[InstanceDemand], model: GpuModel) -> list[tuple[str, str]]:
    """``(workload, profile)`` per instance, largest first, then by name: the packing order."""
    out = [(d.workload, d.profile) for d in demands for _ in range(d.count)]
    return sorted(out, key=lambda wp: (-model.profile(wp[1]).memory_slices, -model.profile(wp[1]).compute_slices,
                                       wp[1], wp[0]))


def _reuse_free_instances(
    wanted: list[tuple[str, str]], gpus: Sequence[GpuState]
) -> tuple[list[tuple[str, str]], list[Reuse]]:
    free = [(g.node, g.index if g.index is not None else -1, device, profile)
            for g in gpus for device, profile in g.free_instances]
    free.sort()
    rest, reused = [], []
    for workload, profile in wanted:
        match = next((f for f in free if f[3] == profile), None)
        if match is None:
            rest.append((workload, profile))
            continue
        free.remove(match)
        reused.append(Reuse(workload, profile, match[0], match[2]))
    return rest, reused


def _candidates(gpus: Sequence[GpuState], converting: set[str], used: set[str]) -> list[GpuState]:
    """GPUs that may be repartitioned, in the order they are used."""
    idle_mig = [g for g in gpus if g.mig_enabled and g.holders <= converting and g.gpu_uuid not in used]
    freed = [g for g in gpus if not g.mig_enabled and g.holders and g.holders <= converting]
    per_node = Counter(g.node for g in idle_mig + freed)
    mig_nodes = {g.node for g in gpus if g.mig_enabled}

    def order(g: GpuState) -> tuple[int, int, int, str, int, str]:
        return (0 if g.mig_enabled else 1, 0 if g.node in mig_nodes else 1, -per_node[g.node], g.node,
                g.index if g.index is not None else 1 << 30, g.gpu_uuid)

    return sorted(idle_mig + freed, key=order)


def _pack(
    model: GpuModel, wanted: Sequence[tuple[str, str]]
) -> list[tuple[tuple[str, ...], tuple[tuple[str, int], ...], tuple[tuple[str, str], ...]]]:
    """First-fit decreasing into valid layouts, each filled up with its most common profile."""
    bins: list[list[tuple[str, str]]] = []
    for workload, profile in wanted:
        for b in bins:
            if place_layout(model, [p for _, p in b] + [profile]) is not None:
                b.append((workload, profile))
                break
        else:
            bins.append([(workload, profile)])
    out = []
    for b in bins:
        layout = [p for _, p in b]
        common = Counter(layout).most_common(1)[0][0]
        while place_layout(model, layout + [common]) is not None:
            layout.append(common)
        placements = place_layout(model, layout)
        assert placements is not None  # every bin was built from valid layouts
        out.append((tuple(p for p, _ in placements), placements, tuple(b)))
    out.sort(key=lambda x: (x[0], -len(x[2]), x[2]))  # identical layouts side by side (uniform nodes), fullest first
    return out
