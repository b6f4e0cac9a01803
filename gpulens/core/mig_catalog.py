"""MIG profile catalogs of the GPU models gpulens simulates and recognises, and layout validity.

Memory sizes are what ``nvidia-smi`` reports per GPU instance (MiB) on driver 590: measured on H100 and
H200 for the profiles present in real captures, the others from NVIDIA's MIG user guide tables.
A GPU has 7 compute slices and 8 memory slices; a layout is valid when both budgets and each
profile's maximum instance count hold, and when its instances can be placed: each GPU-instance profile
starts only at the memory-slice positions the driver allows (``nvidia-smi mig -lgipp``, the same
table on A100, H100 and H200) and instances may not overlap.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from gpulens.core.vocabulary import COMPUTE_SLICES, MEMORY_SLICES, slices_gpu_equivalents

MIB = 1024 * 1024


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile of one GPU model."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_bytes: int
    max_instances: int

    @property
    def gpu_equivalents(self) -> float:
        return slices_gpu_equivalents(self.compute_slices)

    @property
    def placement_starts(self) -> tuple[int, ...]:
        """Memory-slice positions an instance of this profile may start at (``nvidia-smi mig -lgipp``)."""
        return PLACEMENT_STARTS[(self.compute_slices, self.memory_slices)]


PLACEMENT_STARTS: dict[tuple[int, int], tuple[int, ...]] = {
    # (compute slices, memory slices) -> start positions; an instance spans [start, start + memory slices).
    (1, 1): (0, 1, 2, 3, 4, 5, 6),
    (1, 2): (0, 2, 4, 6),
    (2, 2): (0, 2, 4),
    (3, 4): (0, 4),
    (4, 4): (0,),
    (7, 8): (0,),
}


@dataclass(frozen=True)
class GpuModel:
    """A GPU product with its memory and MIG catalog."""

    name: str
    """Product name as NVML reports it."""
    short_name: str
    memory_bytes: int
    architecture: str
    mig_profiles: tuple[MigProfile, ...]

    @property
    def has_gpm(self) -> bool:
        """GPM (per-MIG activity) exists on Hopper and later."""
        return self.architecture in {"hopper", "blackwell"}

    def profile(self, name: str) -> MigProfile:
        for p in self.mig_profiles:
            if p.name == name:
                return p
        known = ", ".join(p.name for p in self.mig_profiles)
        raise ValueError(f"{self.short_name} has no MIG profile {name!r} (known: {known})")


def _p(name: str, g: int, mem_slices: int, mib: int, max_n: int) -> MigProfile:
    return MigProfile(name, g, mem_slices, mib * MIB, max_n)


H100_80GB = GpuModel(
    name="NVIDIA H100 80GB HBM3",
    short_name="H100",
    memory_bytes=81559 * MIB,
    architecture="hopper",
    mig_profiles=(
        _p("1g.10gb", 1, 1, 9984, 7),
        _p("1g.20gb", 1, 2, 20096, 4),
        _p("2g.20gb", 2, 2, 20096, 3),
        _p("3g.40gb", 3, 4, 40448, 2),
        _p("4g.40gb", 4, 4, 40448, 1),
        _p("7g.80gb", 7, 8, 80896, 1),
    ),
)

H200_141GB = GpuModel(
    name="NVIDIA H200",
    short_name="H200",
    memory_bytes=143771 * MIB,
    architecture="hopper",
    mig_profiles=(
        _p("1g.18gb", 1, 1, 16384, 7),
        _p("1g.35gb", 1, 2, 33280, 4),
        _p("2g.35gb", 2, 2, 33280, 3),
        _p("3g.71gb", 3, 4, 71424, 2),
        _p("4g.71gb", 4, 4, 71424, 1),
        _p("7g.141gb", 7, 8, 143104, 1),
    ),
)

A100_80GB = GpuModel(
    name="NVIDIA A100-SXM4-80GB",
    short_name="A100",
    memory_bytes=81920 * MIB,
    architecture="ampere",
    mig_profiles=(
        _p("1g.10gb", 1, 1, 9728, 7),
        _p("1g.20gb", 1, 2, 19968, 4),
        _p("2g.20gb", 2, 2, 19968, 3),
        _p("3g.40gb", 3, 4, 40192, 2),
        _p("4g.40gb", 4, 4, 40192, 1),
        _p("7g.80gb", 7, 8, 80384, 1),
    ),
)

MODELS: dict[str, GpuModel] = {m.short_name: m for m in (H100_80GB, H200_141GB, A100_80GB)}


def model_by_name(name: str) -> GpuModel:
    """Find a model by short name (``H200``) or NVML product name (``NVIDIA H200``)."""
    for m in MODELS.values():
        if name in (m.short_name, m.name):
            return m
    raise ValueError(f"unknown GPU model {name!r} (known: {', '.join(MODELS)})")


def short_model(name: str | None) -> str:
    """``NVIDIA H200`` -> ``H200``; unknown names pass through unchanged ('' for None)."""
    if not name:
        return ""
    try:
        return model_by_name(name).short_name
    except ValueError:
        return name


def profile_slices(profile: str) -> int:
    """Compute slices of a profile name such as ``3g.71gb`` (also ``1c.3g.71gb``): the ``g`` number."""
    part = profile.split(".")[-2] if profile.count(".") >= 2 else profile.split(".")[0]
    if not part.endswith("g") or not part[:-1].isdigit():
        raise ValueError(f"not a MIG profile name: {profile!r}")
    return int(part[:-1])


def layout_problems(model: GpuModel, layout: Iterable[str]) -> list[str]:
    """Why a list of GPU-instance profiles cannot coexist on one GPU of ``model`` (empty when valid)."""
    problems: list[str] = []
    names = list(layout)
    try:
        profiles = [model.profile(n) for n in names]
    except ValueError as exc:
        return [str(exc)]
    compute = sum(p.compute_slices for p in profiles)
    memory = sum(p.memory_slices for p in profiles)
    if compute > COMPUTE_SLICES:
        problems.append(f"{compute} compute slices exceed {COMPUTE_SLICES}")
    if memory > MEMORY_SLICES:
        problems.append(f"{memory} memory slices exceed {MEMORY_SLICES}")
    for name, count in Counter(names).items():
        p = model.profile(name)
        if count > p.max_instances:
            problems.append(f"{count} x {name} exceed its maximum of {p.max_instances}")
    return problems


def place_layout(model: GpuModel, layout: Iterable[str]) -> tuple[tuple[str, int], ...] | None:
    """A placement ``(profile, start slice)`` for every instance of ``layout``, or ``None`` if none exists.

    Deterministic: larger instances first, each at its lowest free allowed start, with backtracking.
    """
    names = sorted(layout, key=lambda n: (-model.profile(n).memory_slices, -model.profile(n).compute_slices, n))
    if layout_problems(model, names):
        return None
    used = [False] * MEMORY_SLICES
    placed: list[tuple[str, int]] = []

    def place(i: int) -> bool:
        if i == len(names):
            return True
        p = model.profile(names[i])
        for start in p.placement_starts:
            span = range(start, start + p.memory_slices)
            if all(not used[k] for k in span):
                for k in span:
                    used[k] = True
                placed.append((p.name, start))
                if place(i + 1):
                    return True
                placed.pop()
                for k in span:
                    used[k] = False
        return False

    return tuple(placed) if place(0) else None
