"""The kubelet-backed allocation source: PodResources x device directory x tenants -> Allocation.

Joins, on the collection cycle: which container holds which device id (kubelet ``List``, device plugin
and DRA), what the id is on this node (GPU / MIG UUID, via the NVML device directory and ResourceSlices; a
DRA claim's consumed capacity of a shared device, and MIG instances the DRA driver creates on demand),
how many replicas a shared GPU advertises (``GetAllocatableResources``), and who the pod belongs to
(tenant, Kueue queue, owning workload). A pod that asks for part of a GPU (HAMi, a KAI fraction, a
milli-GPU request: :mod:`gpulens.core.gpu_share`) holds that part of the device (its GE), shared as
time-slicing shares it; the rest of the GPU stays free capacity. A KAI reservation pod's GPU is held by
its group's fraction pods (label ``runai-gpu-group``), each with its fraction. The kubelet failing raises ``KubeletUnavailableError`` (the
cycle counts it under ``kubelet``); tenant lookups failing only degrade the tenant to the namespace
name and are counted under ``tenants``, DRA claims no ResourceSlice resolves under ``dra``: the source is
:class:`~gpulens.core.device_model.ErrorCounting` and its ``take_errors()`` adds up its parts' counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from opentelemetry import trace

from exporter.kubelet.client import (
    KUBELET_SOURCE,
    ClaimGrant,
    DeviceGrant,
    KubeletUnavailableError,
    PodResourcesClient,
    parse_list_response,
    replicas_per_device,
)
from exporter.kubelet.device_ids import (
    MIG_RESOURCE_PREFIX,
    DeviceDirectory,
    parse_device_id,
    shared_base,
)
from exporter.kubelet.dra import DRA_SOURCE, DraDevice, ResourceSliceDirectory
from gpulens.core.device_model import Allocation, ErrorCounter, SharingMode, merge_errors
from gpulens.core.mig_catalog import COMPUTE_SLICES, profile_slices
from gpulens.core.tenancy.api_objects import TENANTS_SOURCE
from gpulens.core.tenancy.resolver import PodInfo, TenantResolver

tracer = trace.get_tracer(__name__)


class KubeletAllocationSource:
    """An :class:`gpulens.core.device_model.AllocationSource` on the kubelet PodResources API."""

    def __init__(
        self,
        client: PodResourcesClient,
        *,
        directory: Callable[[], DeviceDirectory] = DeviceDirectory,
        tenants: TenantResolver | None = None,
        slices: ResourceSliceDirectory | None = None,
        allocatable_refresh_seconds: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self._allocatable_refresh = allocatable_refresh_seconds
        self._monotonic = monotonic
        self._replica_counts: dict[str, int] = {}
        self._replicas_at: float | None = None
        self._directory = directory
        self._tenants = tenants
        self._slices = slices
        self._errors = ErrorCounter()

    def read_allocations(self, now: float) -> tuple[Allocation, ...]:
        with tracer.start_as_current_span("gpulens.kubelet_list") as span:
            view = parse_list_response(self.client.list())
            span.set_attribute("gpulens.device_grants", len(view.devices))
            span.set_attribute("gpulens.claim_grants", len(view.claims))
            replicas = self._replicas(view.devices)
        directory = self._directory()
        pods = {(g.namespace, g.pod) for g in view.devices} | {(c.namespace, c.pod) for c in view.claims}
        with tracer.start_as_current_span("gpulens.resolve_tenants") as span:
            span.set_attribute("gpulens.pods", len(pods))
            infos = {key: self._pod_info(*key) for key in sorted(pods)}
        allocations: list[Allocation] = []
        for grant in view.devices:
            if infos[(grant.namespace, grant.pod)].finished:
                continue  # a finished pod holds nothing (pre-1.34 kubelets still list it)
            ref = parse_device_id(grant.device_id)
            uuid = directory.resolve(ref) or grant.device_id
            base_id = shared_base(grant.device_id)
            advertised = replicas.get(base_id, 0) if ref.replica is not None else 1
            if ref.replica is not None and advertised == 0:  # allocatable unknown: count what is held
                advertised = sum(1 for g in view.devices if shared_base(g.device_id) == base_id)
            info = infos[(grant.namespace, grant.pod)]
            if info.gpu_group is not None and self._tenants is not None:  # KAI: the group's fractions hold the GPU
                allocations += self._group_fractions(self._tenants, info.gpu_group, uuid, directory)
                continue
            share = _device_share(uuid, grant.resource_name, directory)
            mode = (SharingMode.MIG if uuid.startswith("MIG-") or grant.resource_name.startswith(MIG_RESOURCE_PREFIX)
                    else SharingMode.TIME_SLICING if ref.replica is not None else SharingMode.EXCLUSIVE)
            held = share / max(advertised, 1)
            fraction = _fraction(info, uuid, directory)
            if fraction is not None:  # a fractional holder counts its part, whatever replicas the plugin splits into
                held, mode = share * fraction, SharingMode.TIME_SLICING
            allocations.append(_allocation(info, grant.container, uuid, mode, held, ref.replica))
        placed: dict[tuple[str, str, str], str] = {}
        for claim in view.claims:
            if infos[(claim.namespace, claim.pod)].finished:
                continue
            holding = self._claim_holding(claim, directory, placed)
            if holding is None:
                self._errors.count(DRA_SOURCE)
                continue
            allocations.append(_allocation(infos[(claim.namespace, claim.pod)], claim.container, *holding, None))
        return tuple(allocations)

    def _group_fractions(self, tenants: TenantResolver, group: str, uuid: str,
                         directory: DeviceDirectory) -> list[Allocation]:
        """The fraction pods of a KAI GPU group, each holding its fraction of the GPU that the group's
        reservation pod holds (the reservation pod itself holds nothing: it is KAI's placeholder)."""
        out = []
        for namespace, pod, container in tenants.gpu_group_members(group):
            info = self._pod_info(namespace, pod)
            fraction = _fraction(info, uuid, directory)
            if fraction is not None and not info.finished:
                out.append(_allocation(info, container, uuid, SharingMode.TIME_SLICING,
                                       _device_share(uuid, "", directory) * fraction, None))
        return out

    def _claim_holding(self, claim: ClaimGrant, directory: DeviceDirectory,
                       placed: dict[tuple[str, str, str], str]) -> tuple[str, SharingMode, float] | None:
        """(UUID, sharing mode, GE) a DRA claim holds: a device its slice names, or a MIG instance the
        driver created on demand (found under its parent GPU by profile, like a static one; the parent
        with the partition's counter share until NVML lists it); a claim consuming part of a shared
        device's capacity holds that part."""
        found = self._slices.device(claim.driver, claim.pool, claim.device) if self._slices else None
        if found is None:
            return None
        key = (claim.driver, claim.pool, claim.device)
        uuid = found.uuid or placed.get(key) or _created_mig(found, directory, set(placed.values()))
        if uuid is None and found.parent_uuid is not None:
            share = found.counter_share if found.counter_share is not None else _device_share(
                "", MIG_RESOURCE_PREFIX + (found.profile or ""), directory)
            return found.parent_uuid, SharingMode.MIG if found.profile else SharingMode.TIME_SLICING, share
        if uuid is None:
            return None
        placed[key] = uuid
        mode = SharingMode.MIG if uuid.startswith("MIG-") or found.profile else SharingMode.EXCLUSIVE
        ge = _device_share(uuid, "", directory)
        result = self._slices.claim_result(claim.claim_namespace, claim.claim_name, *key) if self._slices else None
        part = result.share_of(found) if result is not None else None
        if part is not None and part < 1.0:  # consumable capacity: the claim holds part of a shared device
            return uuid, SharingMode.TIME_SLICING if mode is SharingMode.EXCLUSIVE else mode, ge * part
        return uuid, mode, ge

    def _replicas(self, grants: tuple[DeviceGrant, ...]) -> dict[str, int]:
        """Advertised replicas per shared device, from ``GetAllocatableResources`` (refreshed when stale or
        when a replica of a device not seen before shows up)."""
        now = self._monotonic()
        unknown = any(shared_base(g.device_id) != g.device_id and shared_base(g.device_id) not in self._replica_counts
                      for g in grants)
        since = None if self._replicas_at is None else now - self._replicas_at
        if since is None or since >= self._allocatable_refresh or (unknown and since >= 1.0):
            self._replicas_at = now
            try:
                self._replica_counts = replicas_per_device(self.client.allocatable())
            except KubeletUnavailableError:
                self._errors.count(KUBELET_SOURCE)
        return self._replica_counts

    def advertised_replicas(self) -> dict[str, int]:
        """Device id -> replicas the device plugin advertises (as of the last ``GetAllocatableResources``)."""
        return dict(self._replica_counts)

    def take_errors(self) -> dict[str, int]:
        """Errors counted since the previous call, by source (``kubelet``, ``tenants``, ``dra``), its parts' included."""
        parts = [p.take_errors() for p in (self._tenants, self._slices) if p is not None]
        return merge_errors(self._errors.take_errors(), *parts)

    def close(self) -> None:
        self.client.close()

    def _pod_info(self, namespace: str, pod: str) -> PodInfo:
        if self._tenants is None:
            return PodInfo(namespace, pod, None, namespace, "namespace")
        try:
            return self._tenants.resolve(namespace, pod)
        except Exception:  # a bug or odd object must not drop the allocation
            self._errors.count(TENANTS_SOURCE)
            return PodInfo(namespace, pod, None, namespace, "namespace")


def _created_mig(found: DraDevice, directory: DeviceDirectory, placed: set[str]) -> str | None:
    """The MIG instance NVML lists under the partition's parent GPU with its profile (the first not yet
    placed this cycle), for a partition whose slice does not name a UUID."""
    if found.parent_uuid is None or found.profile is None:
        return None
    for uuid, info in sorted(directory.by_uuid.items()):
        if info.parent_uuid == found.parent_uuid and info.profile == found.profile and uuid != info.parent_uuid \
                and uuid not in placed:
            return uuid
    return None


def _fraction(info: PodInfo, uuid: str, directory: DeviceDirectory) -> float | None:
    """The part of the device a fractional holder asks for (its memory in bytes counts once NVML gave the
    device's memory); ``None`` for a holder of whole devices."""
    if info.share is None:
        return None
    device = directory.by_uuid.get(uuid)
    return info.share.share(device.memory_total_bytes if device is not None else None)


def _device_share(uuid: str, resource_name: str, directory: DeviceDirectory) -> float:
    info = directory.by_uuid.get(uuid)
    if info is not None:
        return info.gpu_equivalents
    if resource_name.startswith(MIG_RESOURCE_PREFIX):
        try:
            return profile_slices(resource_name.removeprefix(MIG_RESOURCE_PREFIX)) / COMPUTE_SLICES
        except ValueError:
            return 1.0
    return 1.0


def _allocation(info: PodInfo, container: str, uuid: str, mode: SharingMode, share: float,
                replica: int | None) -> Allocation:
    return Allocation(
        device_id=uuid,
        namespace=info.namespace,
        pod=info.name,
        container=container,
        tenant=info.tenant,
        sharing_mode=mode,
        gpu_equivalents=share,
        replica=replica,
        pod_uid=info.uid,
        workload_kind=info.workload_kind,
        workload_name=info.workload_name,
        queue=info.queue,
    )
