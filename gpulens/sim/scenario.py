"""The scenario of a simulated fleet: node pools, tenants, quotas, workloads and faults, read from YAML.

``load_scenario(None)`` returns the documented built-in default (``default_scenario.yaml`` next to this
module). Every problem (bad YAML, unknown field, invalid MIG layout, unknown GPU model, dangling
reference) becomes one ``UserError`` line that names the file and the field. The format is documented
in ``docs/simulator.md``.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from gpulens.core.device_model import WHOLE_GPU_PROFILE, SharingMode
from gpulens.core.mig_catalog import GpuModel, layout_problems, model_by_name
from gpulens.core.timeparse import duration_seconds, time_seconds, utc_datetime

DEFAULT_SCENARIO_PATH = Path(__file__).with_name("default_scenario.yaml")
SCENARIOS_DIR = Path(__file__).with_name("scenarios")

Duration = Annotated[float, BeforeValidator(duration_seconds), Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Archetype(StrEnum):
    """Workload behaviours the simulator knows."""

    TRAINING = "training"
    INFERENCE = "inference"
    NOTEBOOK = "notebook"
    BATCH = "batch"


DEFAULT_KIND = {
    Archetype.TRAINING: "JobSet",
    Archetype.INFERENCE: "Deployment",
    Archetype.NOTEBOOK: "StatefulSet",
    Archetype.BATCH: "CronJob",
}


class GpuInstanceSpec(_Strict):
    """One GPU instance of a MIG layout, optionally split into compute instances (slice counts)."""

    profile: str
    compute_instances: list[Annotated[int, Field(ge=1, le=7)]] | None = None


def _gi_entry(value: Any) -> Any:
    return {"profile": value} if isinstance(value, str) else value


GpuInstanceEntry = Annotated[GpuInstanceSpec, BeforeValidator(_gi_entry)]


class Interconnect(StrEnum):
    """How the GPUs of one node reach each other (see ``gpulens/sim/topology.py``)."""

    NVSWITCH = "nvswitch"
    """HGX: every GPU joins every other over NVLink through the NVSwitches (one NVLink domain)."""
    NVLINK_PAIRS = "nvlink-pairs"
    """PCIe cards with NVLink bridges: GPUs 2k and 2k+1 are peers; the rest talk over PCIe."""
    PCIE = "pcie"
    """No NVLink at all."""


class NodeTopologySpec(_Strict):
    """Where a pool's nodes sit: zone, and per node (node i takes entry i mod len) block and sub-block."""

    zone: str = "zone-a"
    blocks: list[str] = []
    subblocks: list[str] = []
    numa_nodes: int = Field(2, ge=1, le=8)
    """NUMA nodes per host; GPUs are split over them in index order."""
    cpus_per_numa: int = Field(56, ge=1, le=1024)


class PoolSpec(_Strict):
    """A node pool: identical nodes with one GPU model and one sharing mode."""

    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    gpu_model: str
    nodes: int = Field(1, ge=1, le=1000)
    gpus_per_node: int = Field(8, ge=1, le=8)
    sharing: SharingMode = SharingMode.EXCLUSIVE
    replicas: int = Field(1, ge=1, le=48)
    """Advertised replicas per device under time-slicing or MPS (also allowed on MIG devices)."""
    mig_layouts: list[list[GpuInstanceEntry]] = []
    """MIG layouts, used by the GPUs of each node in turn (GPU i gets layout i mod len)."""
    flavor: str | None = None
    """Kueue ResourceFlavor of the pool (default: the pool name)."""
    dedicated_tenant: str | None = None
    labels: dict[str, str] = {}
    interconnect: Interconnect | None = None
    """Default: NVSwitch for H100/H200/B200 (HGX), NVLink pairs for A100 and others."""
    topology: NodeTopologySpec = NodeTopologySpec()

    @property
    def model(self) -> GpuModel:
        return model_by_name(self.gpu_model)

    @property
    def flavor_name(self) -> str:
        return self.flavor or self.name

    @property
    def flavor_labels(self) -> dict[str, str]:
        """The ResourceFlavor's nodeLabels: GPU product, sharing mode and the pool's labels, so that no two pools'
        flavors select the same node (every simulated node carries these labels)."""
        return {"nvidia.com/gpu.product": self.model.name.replace(" ", "-"), "gpulens.io/sharing-mode": str(self.sharing),
                **self.labels}

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.nodes)]

    @model_validator(mode="after")
    def _check(self) -> PoolSpec:
        try:
            model = self.model
        except ValueError as exc:
            raise ValueError(f"gpu_model: {exc}") from None
        if self.sharing is SharingMode.MIG:
            if not self.mig_layouts:
                raise ValueError("mig_layouts: a pool in MIG mode needs at least one layout")
            for i, layout in enumerate(self.mig_layouts):
                problems = layout_problems(model, [gi.profile for gi in layout])
                for gi in layout:
                    if gi.compute_instances is not None and not problems:
                        g = model.profile(gi.profile).compute_slices
                        if sum(gi.compute_instances) > g:
                            problems.append(
                                f"compute instances {gi.compute_instances} of {gi.profile} use more than {g} slices"
                            )
                if problems:
                    names = ", ".join(gi.profile for gi in layout)
                    raise ValueError(
                        f"mig_layouts.{i}: invalid {model.short_name} MIG layout [{names}]: {'; '.join(problems)}"
                    )
        elif self.mig_layouts:
            raise ValueError(f"mig_layouts: only a pool with sharing 'mig' has MIG layouts (this one is {self.sharing})")
        if self.sharing in (SharingMode.TIME_SLICING, SharingMode.MPS) and self.replicas < 2:
            raise ValueError(f"replicas: sharing '{self.sharing}' needs replicas >= 2")
        if self.sharing is SharingMode.EXCLUSIVE and self.replicas != 1:
            raise ValueError("replicas: an exclusive pool has replicas 1")
        return self

    def shapes(self) -> set[str]:
        """Device shapes this pool offers: ``gpu``, a GI profile, or ``<c>c.<profile>`` for a split GI."""
        if self.sharing is not SharingMode.MIG:
            return {WHOLE_GPU_PROFILE}
        out: set[str] = set()
        for layout in self.mig_layouts:
            for gi in layout:
                out.update(device_shapes(gi))
        return out


def device_shapes(gi: GpuInstanceSpec) -> list[str]:
    """Shapes of the devices one GPU instance yields (one per compute instance)."""
    if gi.compute_instances is None:
        return [gi.profile]
    return [f"{c}c.{gi.profile}" for c in gi.compute_instances]


def shape_resource(shape: str) -> str:
    """Extended resource a pod requests for a device shape (mixed MIG strategy)."""
    return "nvidia.com/gpu" if shape == WHOLE_GPU_PROFILE else f"nvidia.com/mig-{shape}"


class NamespaceSpec(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    labels: dict[str, str] = {}
    network_policies: int = Field(0, ge=0)
    virtual_cluster: str | None = None
    resource_quota: dict[str, Annotated[float, Field(ge=0)]] = {}
    """Hard limits of the namespace's ResourceQuota ``gpu-quota``, e.g. ``requests.nvidia.com/gpu: 8``."""


class QuotaSpec(_Strict):
    """One (flavor, resource) line of the tenant's Kueue ClusterQueue."""

    flavor: str
    resource: str = "nvidia.com/gpu"
    nominal: float = Field(ge=0)
    borrowing_limit: float | None = Field(None, ge=0)
    lending_limit: float | None = Field(None, ge=0)


class PendingSpec(_Strict):
    """Demand that waits for capacity: ``workloads`` workloads each asking ``quantity`` devices of a shape."""

    shape: str = WHOLE_GPU_PROFILE
    gpu_model: str
    flavor: str
    quantity: float = Field(gt=0)
    workloads: int = Field(1, ge=1)
    namespace: str | None = None


class TenantSpec(_Strict):
    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    cost_center: str | None = None
    namespaces: list[NamespaceSpec] = Field(min_length=1)
    cluster_queue: str | None = None
    """Kueue ClusterQueue (default: the tenant name)."""
    cohort: str | None = None
    local_queues: dict[str, str] = {}
    """LocalQueue name -> namespace (default: one LocalQueue ``<namespace>-queue`` per namespace)."""
    quotas: list[QuotaSpec] = []
    pending: list[PendingSpec] = []

    @property
    def queue_name(self) -> str:
        return self.cluster_queue or self.name

    def local_queue_map(self) -> dict[str, str]:
        """LocalQueue -> namespace; by default one LocalQueue ``<namespace>-queue`` per namespace."""
        return self.local_queues or {f"{ns.name}-queue": ns.name for ns in self.namespaces}


class WorkloadSpec(_Strict):
    """A group of identical pods of one tenant, placed on one pool."""

    name: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    tenant: str
    archetype: Archetype
    pool: str
    namespace: str | None = None
    kind: str | None = None
    pods: int = Field(1, ge=1, le=10000)
    devices_per_pod: int = Field(1, ge=1, le=8)
    shape: str = WHOLE_GPU_PROFILE
    queue: str | None = None
    """LocalQueue the pods were admitted through (default: the tenant's queue for the namespace)."""
    kueue: bool = True
    """False: the pods bypass Kueue (no queue label)."""
    activity: float | None = Field(None, ge=0, le=1)
    """Mean activity when busy (default by archetype)."""
    memory_fraction: float | None = Field(None, gt=0, le=1)
    slot_seconds: Duration = 1800.0
    """Batch only: pods live for one slot of this length, then go away."""
    duty: float = Field(0.6, ge=0, le=1)
    """Batch only: probability that a pod runs in a slot."""
    labels: dict[str, str] = {}
    nodes: list[str] | None = None
    """Place pods only on these nodes of the pool, first fit in this order (a placement chosen on purpose)."""
    gpu_indices: list[list[Annotated[int, Field(ge=0, le=7)]]] | None = None
    """Whole-GPU pools: GPU indices of pod i (entry i mod len), instead of the first free GPUs."""

    @property
    def workload_kind(self) -> str:
        return self.kind or DEFAULT_KIND[self.archetype]


class FaultKind(StrEnum):
    XID79 = "xid79"
    XID48 = "xid48"
    XID13 = "xid13"
    THERMAL = "thermal"
    DEGRADATION = "degradation"
    """A GPU that fails: ``precursor`` signals grow from ``at`` until the hard failure at ``at + fail_after``."""
    LOOKALIKE = "lookalike"
    """A healthy GPU whose ``precursor`` signal looks alarming for a while but never grows into a failure."""


class Precursor(StrEnum):
    """Signals that precede hard GPU failures (see docs/simulator.md for the published patterns)."""

    ECC = "ecc"
    ROW_REMAP = "row_remap"
    NVLINK = "nvlink"
    PCIE = "pcie"
    THERMAL = "thermal"


class FaultSpec(_Strict):
    """A fault on one GPU at ``epoch + at`` (and every ``every`` after, when given; a recurring degradation
    degrades and fails again each cycle, as a weak slot or its replacement part would)."""

    kind: FaultKind
    node: str
    gpu: int = Field(ge=0)
    at: Duration
    every: Duration | None = None
    duration: Duration = 1800.0
    """XID 79: how long the GPU stays off the bus; thermal: length of the throttling window."""
    count: int = Field(1, ge=1)
    """XID 48: double-bit ECC errors added per event."""
    device: int | None = Field(None, ge=0)
    """XID 13 on a MIG GPU: index of the MIG device (in layout order) the application ran on."""
    precursor: Precursor | None = None
    """Degradation / look-alike: which signal trends (ecc, row_remap, nvlink, pcie, thermal)."""
    fail_after: Duration | None = None
    """Degradation: the hard failure comes this long after ``at`` (None: still degrading, not failed yet)."""
    intensity: float = Field(1.0, gt=0, le=10)
    """Degradation / look-alike: scales how strongly the precursor grows (1 = the documented profile)."""

    @model_validator(mode="after")
    def _check(self) -> FaultSpec:
        if self.every is not None and self.every <= self.duration:
            raise ValueError(f"every ({self.every:g} s) must be longer than duration ({self.duration:g} s)")
        trending = self.kind in (FaultKind.DEGRADATION, FaultKind.LOOKALIKE)
        if trending and self.precursor is None:
            raise ValueError(f"precursor: a {self.kind} fault needs one of {', '.join(Precursor)}")
        if self.kind is FaultKind.LOOKALIKE and self.every is not None:
            raise ValueError("every: a lookalike happens once")
        if self.kind is FaultKind.DEGRADATION and self.every is not None:
            if self.fail_after is None:
                raise ValueError("every: a recurring degradation needs fail_after (each cycle ends in a failure)")
            if self.every <= self.fail_after + self.duration:
                raise ValueError(f"every ({self.every:g} s) must be longer than fail_after + duration "
                                 f"({self.fail_after + self.duration:g} s)")
        if not trending and (self.precursor is not None or self.fail_after is not None):
            raise ValueError(f"precursor / fail_after: only degradation and lookalike faults have them, not {self.kind}")
        if self.kind is FaultKind.LOOKALIKE and self.fail_after is not None:
            raise ValueError("fail_after: a lookalike never fails (use kind: degradation)")
        return self


def _utc(value: Any) -> Any:
    """A time in the one time grammar (ISO 8601, UTC without offset; Unix seconds; ``now-1h``) as aware UTC."""
    if isinstance(value, datetime | str | int | float) and not isinstance(value, bool):
        return utc_datetime(time_seconds(value))
    return value


EPOCH_RANGE = (datetime(2020, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))
"""When a scenario's fleet may have booted: the first read integrates the energy of every day since the
epoch (about 3 s of CPU per year of the default fleet), so an epoch of year 1 would take hours."""


class Scenario(_Strict):
    """A whole simulated fleet. Everything it yields is a pure function of (scenario, seed, t)."""

    name: str = "scenario"
    description: str = ""
    seed: int = 0
    epoch: Annotated[datetime, BeforeValidator(_utc)] = datetime(2026, 1, 1, tzinfo=UTC)
    """When the fleet booted: counters (energy, ECC, XID) start here."""
    step: Duration = 60.0
    """Default sample step of ``history``."""
    inventory_step: Duration = 300.0
    """Step of the inventory frames (quotas, pending demand, namespaces, pods) in ``history``."""
    driver_version: str = "590.48.01"
    pools: list[PoolSpec] = Field(min_length=1)
    tenants: list[TenantSpec] = Field(min_length=1)
    workloads: list[WorkloadSpec] = []
    faults: list[FaultSpec] = []

    @field_validator("epoch")
    @classmethod
    def _epoch_in_range(cls, value: datetime) -> datetime:
        if not EPOCH_RANGE[0] <= value < EPOCH_RANGE[1]:
            first, end = (f"{t:%Y-%m-%d}" for t in EPOCH_RANGE)
            raise ValueError(f"must be from {first} to before {end} (got {value.date().isoformat()}): counters are integrated "
                             "day by day from the epoch, so an earlier one costs every day since")
        return value

    @property
    def epoch_seconds(self) -> float:
        return self.epoch.timestamp()

    def pool(self, name: str) -> PoolSpec:
        return next(p for p in self.pools if p.name == name)

    def tenant(self, name: str) -> TenantSpec:
        return next(t for t in self.tenants if t.name == name)

    @model_validator(mode="after")
    def _check_references(self) -> Scenario:
        problems = reference_problems(self)
        if problems:
            raise ValueError(problems[0])
        return self


def _duplicates(names: list[str]) -> list[str]:
    return sorted(n for n, count in Counter(names).items() if count > 1)


def reference_problems(s: Scenario) -> list[str]:
    """Cross-field problems: duplicate names and references to pools, tenants, namespaces, nodes."""
    problems: list[str] = []
    for what, names in (
        ("pool", [p.name for p in s.pools]),
        ("tenant", [t.name for t in s.tenants]),
        ("namespace", [ns.name for t in s.tenants for ns in t.namespaces]),
        ("workload", [w.name for w in s.workloads]),
        ("node", [n for p in s.pools for n in p.node_names()]),
    ):
        for dup in _duplicates(names):
            problems.append(f"{what} name {dup!r} is used twice")
    pools = {p.name: p for p in s.pools}
    tenants = {t.name: t for t in s.tenants}
    for i, p in enumerate(s.pools):
        if p.dedicated_tenant is not None and p.dedicated_tenant not in tenants:
            problems.append(f"pools.{i}.dedicated_tenant: unknown tenant {p.dedicated_tenant!r}")
    flavors = {p.flavor_name for p in s.pools}
    for i, t in enumerate(s.tenants):
        own = {ns.name for ns in t.namespaces}
        for j, q in enumerate(t.quotas):
            if q.flavor not in flavors:
                problems.append(f"tenants.{i}.quotas.{j}.flavor: unknown flavor {q.flavor!r} (known: {', '.join(sorted(flavors))})")
        for lq, ns_name in t.local_queue_map().items():
            if ns_name not in own:
                problems.append(f"tenants.{i}.local_queues.{lq}: namespace {ns_name!r} is not one of the tenant's")
        for j, pend in enumerate(t.pending):
            try:
                model = model_by_name(pend.gpu_model)
                if pend.shape != WHOLE_GPU_PROFILE:
                    model.profile(pend.shape.split(".", 1)[1] if pend.shape.count(".") == 2 else pend.shape)
            except ValueError as exc:
                problems.append(f"tenants.{i}.pending.{j}: {exc}")
            if pend.flavor not in flavors:
                problems.append(f"tenants.{i}.pending.{j}.flavor: unknown flavor {pend.flavor!r}")
            if pend.namespace is not None and pend.namespace not in own:
                problems.append(f"tenants.{i}.pending.{j}.namespace: {pend.namespace!r} is not one of the tenant's")
    for i, w in enumerate(s.workloads):
        where = f"workloads.{i} ({w.name})"
        tenant = tenants.get(w.tenant)
        pool = pools.get(w.pool)
        if tenant is None:
            problems.append(f"{where}.tenant: unknown tenant {w.tenant!r} (known: {', '.join(tenants)})")
            continue
        if pool is None:
            problems.append(f"{where}.pool: unknown pool {w.pool!r} (known: {', '.join(pools)})")
            continue
        if w.namespace is not None and w.namespace not in {ns.name for ns in tenant.namespaces}:
            problems.append(f"{where}.namespace: {w.namespace!r} is not a namespace of tenant {w.tenant!r}")
        if w.queue is not None and w.queue not in tenant.local_queue_map():
            problems.append(f"{where}.queue: {w.queue!r} is not a LocalQueue of tenant {w.tenant!r}")
        if pool.dedicated_tenant is not None and pool.dedicated_tenant != w.tenant:
            problems.append(f"{where}.pool: pool {pool.name!r} is dedicated to tenant {pool.dedicated_tenant!r}")
        for node in w.nodes or []:
            if node not in pool.node_names():
                problems.append(f"{where}.nodes: {node!r} is not a node of pool {pool.name!r}")
        for gpus in w.gpu_indices or []:
            if len(gpus) != w.devices_per_pod or len(set(gpus)) != len(gpus) or max(gpus) >= pool.gpus_per_node:
                problems.append(
                    f"{where}.gpu_indices: each entry names {w.devices_per_pod} distinct GPUs of 0..{pool.gpus_per_node - 1}"
                )
        if w.gpu_indices and pool.sharing is not SharingMode.EXCLUSIVE:
            problems.append(f"{where}.gpu_indices: only for pools with sharing 'exclusive'")
        if w.shape not in pool.shapes():
            problems.append(
                f"{where}.shape: pool {pool.name!r} offers no {w.shape!r} devices (it has: {', '.join(sorted(pool.shapes()))})"
            )
    nodes = {n: p for p in s.pools for n in p.node_names()}
    for i, f in enumerate(s.faults):
        pool = nodes.get(f.node)
        if pool is None:
            problems.append(f"faults.{i}.node: unknown node {f.node!r}")
        elif f.gpu >= pool.gpus_per_node:
            problems.append(f"faults.{i}.gpu: node {f.node!r} has GPUs 0..{pool.gpus_per_node - 1}")
    return problems
