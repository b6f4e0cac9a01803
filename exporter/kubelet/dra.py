"""DRA: resolve (driver, pool, device) from PodResources ``dynamic_resources`` to GPU / MIG UUIDs.

NVIDIA's DRA driver (``gpu.nvidia.com``) publishes ResourceSlices whose devices carry the attributes
``uuid``, ``type`` (``gpu`` / ``mig``), ``parentUUID`` and ``profile``. Slices of this node are listed
from the Kubernetes API (``resource.k8s.io/v1``, falling back to ``v1beta1``) and cached; an unknown
device triggers one refresh at most every ``min_refresh`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpulens.core.device_model import ErrorCounter
from gpulens.core.kube_api import KubernetesApiError, KubernetesReads

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


def devices_of_slices(listing: dict[str, Any]) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device name) -> UUID for every device of a ResourceSlice list."""
    out: dict[tuple[str, str, str], str] = {}
    for item in listing.get("items") or []:
        spec = item.get("spec", {})
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for device in spec.get("devices") or []:
            attrs = device.get("attributes") or (device.get("basic") or {}).get("attributes") or {}
            uuid = _attr(attrs, "uuid")
            if uuid:
                out[(driver, pool, device.get("name", ""))] = uuid
    return out


class ResourceSliceDirectory:
    """Cached lookups of DRA devices published for one node."""

    def __init__(self, api: KubernetesReads, node: str, *, min_refresh: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._api, self._node, self._min_refresh, self._clock = api, node, min_refresh, clock
        self._devices: dict[tuple[str, str, str], str] = {}
        self._at: float | None = None
        self._version: str | None = None
        self._errors = ErrorCounter()

    def take_errors(self) -> dict[str, int]:
        """Failed ResourceSlice lists since the previous call (:class:`~gpulens.core.device_model.ErrorCounting`)."""
        return self._errors.take_errors()

    def uuid(self, driver: str, pool: str, device: str) -> str | None:
        key = (driver, pool, device)
        if key not in self._devices and (self._at is None or self._clock() - self._at >= self._min_refresh):
            self._refresh()
        return self._devices.get(key)

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
            self._devices = devices_of_slices(listing)
            return
