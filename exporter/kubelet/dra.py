"""DRA: resolve (driver, pool, device) from PodResources ``dynamic_resources`` to GPU / MIG UUIDs and shares.

NVIDIA's DRA driver (``gpu.nvidia.com``) publishes ResourceSlices whose devices carry the attributes
``uuid``, ``type`` (``gpu`` / ``mig``), ``parentUUID`` and ``profile``, their ``capacity`` (``memory``,
``multiprocessors`` ...) and, for partitionable devices (a MIG instance the driver creates on demand),
``consumesCounters`` drawn from the slice's ``sharedCounters`` (the physical GPU's counters). Slices of
this node are listed from the Kubernetes API (``resource.k8s.io/v1``, falling back to ``v1beta2`` and
``v1beta1``) and cached; an unknown device triggers one refresh at most every ``min_refresh`` seconds.

What a claim holds of a device (DRA 1.36, consumable capacity): its allocation result's
``consumedCapacity`` over the device's capacity (the largest ratio: a share of memory or of
multiprocessors); a device with ``allowMultipleAllocations`` may be shared by several claims (each result
has its own ``shareID``). The claims are read from ``status.allocation.devices.results[]`` (cached for
``claim_ttl`` seconds per claim).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpulens.core.device_model import ErrorCounter
from gpulens.core.kube_api import KubernetesApiError, KubernetesReads, segment
from gpulens.core.quantity import parse_quantity

API_VERSIONS = ("v1", "v1beta2", "v1beta1")
DRA_SOURCE = "dra"
"""``source`` label of failed ResourceSlice lists and DRA claims no slice resolves."""


def _attr(attrs: dict[str, Any], name: str) -> str | None:
    value = attrs.get(name) or attrs.get(f"gpu.nvidia.com/{name}")
    if isinstance(value, dict):
        for kind in ("string", "version", "int", "bool"):
            if kind in value:
                return str(value[kind])
        return None
    return str(value) if value is not None else None


@dataclass(frozen=True)
class DraDevice:
    """One device of a ResourceSlice, as attribution needs it."""

    uuid: str | None
    """GPU or MIG UUID; ``None`` for a partition the driver has not created yet (dynamic MIG)."""
    parent_uuid: str | None = None
    profile: str | None = None
    capacity: Mapping[str, float] = field(default_factory=dict)
    """Capacity by name (``memory`` in bytes, ``multiprocessors`` ...)."""
    counter_share: float | None = None
    """The largest part of its counter set's counters (the physical GPU's) that the device consumes."""


def _capacity(entries: Mapping[str, Any] | None) -> dict[str, float]:
    out = {}
    for name, entry in (entries or {}).items():
        value = parse_quantity(entry.get("value") if isinstance(entry, dict) else entry)
        if value:
            out[str(name).rpartition("/")[2]] = value
    return out


def _counter_share(device: Mapping[str, Any], counter_sets: Mapping[str, dict[str, float]]) -> float | None:
    ratios = []
    for use in device.get("consumesCounters") or []:
        total = counter_sets.get(str(use.get("counterSet", "")), {})
        for name, consumed in _capacity(use.get("counters")).items():
            if total.get(name):
                ratios.append(consumed / total[name])
    return min(1.0, max(ratios)) if ratios else None


def dra_devices(listing: dict[str, Any]) -> dict[tuple[str, str, str], DraDevice]:
    """(driver, pool, device name) -> :class:`DraDevice` for every device of a ResourceSlice list."""
    items = listing.get("items") or []
    counter_sets: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for item in items:  # a pool's shared counters may sit in another slice of the pool than its devices
        spec = item.get("spec", {})
        key = (spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))
        for counter_set in spec.get("sharedCounters") or []:
            counter_sets.setdefault(key, {})[str(counter_set.get("name", ""))] = _capacity(counter_set.get("counters"))
    out: dict[tuple[str, str, str], DraDevice] = {}
    for item in items:
        spec = item.get("spec", {})
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for device in spec.get("devices") or []:
            body = device.get("basic") or device  # v1beta1 nests a device's fields under ``basic``
            attrs = body.get("attributes") or {}
            uuid, parent = _attr(attrs, "uuid"), _attr(attrs, "parentUUID")
            if uuid or parent:
                out[(driver, pool, device.get("name", ""))] = DraDevice(
                    uuid, parent, _attr(attrs, "profile"), _capacity(body.get("capacity")),
                    _counter_share(body, counter_sets.get((driver, pool), {})))
    return out


@dataclass(frozen=True)
class ClaimResult:
    """What one allocation result of a ResourceClaim holds of its device."""

    share_id: str | None
    consumed: Mapping[str, float]
    """``consumedCapacity`` by name (empty: the claim holds the whole device)."""

    def share_of(self, device: DraDevice) -> float | None:
        """The largest part of the device's capacity the claim consumes; ``None`` when it states none."""
        ratios = [v / device.capacity[k] for k, v in self.consumed.items() if device.capacity.get(k)]
        return min(1.0, max(ratios)) if ratios else None


def claim_results(claim: Mapping[str, Any]) -> dict[tuple[str, str, str], ClaimResult]:
    """(driver, pool, device) -> :class:`ClaimResult` of a ResourceClaim's ``status.allocation``."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return {(str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", ""))):
            ClaimResult(r.get("shareID"), _capacity(r.get("consumedCapacity"))) for r in results}


class ResourceSliceDirectory:
    """Cached lookups of DRA devices published for one node."""

    def __init__(self, api: KubernetesReads, node: str, *, min_refresh: float = 10.0, claim_ttl: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._api, self._node, self._min_refresh, self._clock = api, node, min_refresh, clock
        self._devices: dict[tuple[str, str, str], DraDevice] = {}
        self._at: float | None = None
        self._version: str | None = None
        self._errors = ErrorCounter()
        self._claim_ttl = claim_ttl
        self._claims: dict[tuple[str, str], tuple[float, dict[tuple[str, str, str], ClaimResult] | None]] = {}

    def take_errors(self) -> dict[str, int]:
        """Failed ResourceSlice lists since the previous call (:class:`~gpulens.core.device_model.ErrorCounting`)."""
        return self._errors.take_errors()

    def uuid(self, driver: str, pool: str, device: str) -> str | None:
        found = self.device(driver, pool, device)
        return found.uuid if found is not None else None

    def device(self, driver: str, pool: str, device: str) -> DraDevice | None:
        key = (driver, pool, device)
        if key not in self._devices and (self._at is None or self._clock() - self._at >= self._min_refresh):
            self._refresh()
        return self._devices.get(key)

    def claim_result(self, namespace: str, claim: str, driver: str, pool: str, device: str) -> ClaimResult | None:
        """The allocation result of ResourceClaim ``namespace/claim`` for that device (``None``: unreadable)."""
        now = self._clock()
        cached = self._claims.get((namespace, claim))
        if cached is None or now - cached[0] >= self._claim_ttl:
            if len(self._claims) > 4096:  # claims of pods long gone
                self._claims = {k: v for k, v in self._claims.items() if now - v[0] < self._claim_ttl}
            cached = (now, self._read_claim(namespace, claim))
            self._claims[(namespace, claim)] = cached
        results = cached[1]
        return results.get((driver, pool, device)) if results is not None else None

    def _read_claim(self, namespace: str, claim: str) -> dict[tuple[str, str, str], ClaimResult] | None:
        where = f"namespaces/{segment(namespace)}/resourceclaims/{segment(claim)}"
        for version in (self._version,) if self._version else API_VERSIONS:
            try:
                return claim_results(self._api.get(f"/apis/resource.k8s.io/{version}/{where}"))
            except KubernetesApiError as exc:
                if exc.status == 404:
                    continue
                self._errors.count(DRA_SOURCE)
                return None
        return None

    def _refresh(self) -> None:
        self._at = self._clock()
        versions = (self._version,) if self._version else API_VERSIONS
        for version in versions:
            try:
                listing = self._api.get(f"/apis/resource.k8s.io/{version}/resourceslices",
                                        {"fieldSelector": f"spec.nodeName={self._node}"})
            except KubernetesApiError as exc:
                if exc.status == 404:
                    continue
                self._errors.count(DRA_SOURCE)
                return
            self._version = version
            self._devices = dra_devices(listing)
            return
