"""DRA device quarantine: find a failing GPU's DRA device and the DeviceTaintRule version the cluster serves.

A ``DeviceTaintRule`` (KEP-5055, group ``resource.k8s.io``: ``v1alpha3`` in Kubernetes 1.33-1.35,
``v1beta2`` from 1.36, behind the ``DRADeviceTaintRules`` gate) taints the devices its
``spec.deviceSelector`` (driver, pool, device) matches, so a scheduler keeps new claims off one GPU
instead of the whole Node. Each rule is a whole object gpulens owns (named ``gpulens-<node>-<device>``,
labelled ``app.kubernetes.io/managed-by: gpulens``, the Node in an annotation), so it is written by
server-side apply and removed by DELETE; gpulens never touches a rule without its label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from analytics.remediation.policy import MANAGED_BY, NODE_ANNOTATION, TAINT_KEY
from gpulens.core.kube_api import KubernetesApiError, KubernetesReads, NotFoundError, segment

GROUP = "resource.k8s.io"
RULES = "devicetaintrules"
SLICES = "resourceslices"
OURS = f"{MANAGED_BY}=gpulens"


@dataclass(frozen=True)
class DraDevice:
    """A device as a ResourceSlice publishes it."""

    driver: str
    pool: str
    device: str
    gpu_uuid: str

    @property
    def ref(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True)
class DraApi:
    """The served versions of ``resource.k8s.io`` that hold DeviceTaintRules and ResourceSlices (None: not served)."""

    rules: str | None
    slices: str | None

    def rule_path(self, name: str = "") -> str:
        return f"/apis/{GROUP}/{self.rules}/{RULES}" + (f"/{segment(name)}" if name else "")


def discover(api: KubernetesReads) -> DraApi:
    """Which versions serve DeviceTaintRules and ResourceSlices (``GET /apis/resource.k8s.io`` and each version)."""
    try:
        group = api.get(f"/apis/{GROUP}")
    except NotFoundError:
        return DraApi(None, None)
    rules = slices = None
    for entry in group.get("versions") or []:
        version = entry.get("version")
        try:
            names = {r.get("name") for r in api.get(f"/apis/{GROUP}/{version}").get("resources") or []}
        except NotFoundError:
            continue
        rules = rules or (version if RULES in names else None)
        slices = slices or (version if SLICES in names else None)
    return DraApi(rules, slices)


def _attr(attrs: dict[str, Any], name: str) -> str | None:
    value = attrs.get(name) or next((v for k, v in attrs.items() if k.endswith(f"/{name}")), None)
    if isinstance(value, dict):
        value = next((value[k] for k in ("string", "version", "int", "bool") if k in value), None)
    return str(value) if value is not None else None


def node_devices(api: KubernetesReads, dra: DraApi, node: str) -> list[DraDevice]:
    """Every GPU device (whole GPU or MIG, by its parent) the Node's ResourceSlices publish."""
    listing = api.get(f"/apis/{GROUP}/{dra.slices}/{SLICES}", {"fieldSelector": f"spec.nodeName={node}"})
    out = []
    for item in listing.get("items") or []:
        spec = item.get("spec") or {}
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for device in spec.get("devices") or []:
            attrs = device.get("attributes") or (device.get("basic") or {}).get("attributes") or {}
            gpu = _attr(attrs, "parentUUID") or _attr(attrs, "uuid")
            if gpu:
                out.append(DraDevice(driver, pool, str(device.get("name", "")), gpu))
    return out


def our_rules(api: KubernetesReads, dra: DraApi) -> dict[str, tuple[str, ...]]:
    """Node -> names of the DeviceTaintRules labelled as ours (only those; others are not ours to touch)."""
    if dra.rules is None:
        return {}
    out: dict[str, list[str]] = {}
    for item in api.get(dra.rule_path(), {"labelSelector": OURS}).get("items") or []:
        meta = item.get("metadata") or {}
        if (meta.get("labels") or {}).get(MANAGED_BY) != "gpulens":
            continue
        node = (meta.get("annotations") or {}).get(NODE_ANNOTATION, "")
        out.setdefault(node, []).append(str(meta.get("name", "")))
    return {n: tuple(sorted(names)) for n, names in out.items()}


_NOT_NAME = re.compile(r"[^a-z0-9.-]+")


def rule_name(node: str, device: str) -> str:
    """A DNS-1123 subdomain name: ``gpulens-<node>-<device>``, lower-cased, at most 253 characters."""
    text = _NOT_NAME.sub("-", f"gpulens-{node}-{device}".lower()).strip("-.")
    return text[:253].rstrip("-.")


def rule_object(version: str, node: str, device: DraDevice, value: str, effect: str,
                notes: dict[str, str]) -> dict[str, Any]:
    """The whole DeviceTaintRule gpulens owns for one device."""
    return {
        "apiVersion": f"{GROUP}/{version}", "kind": "DeviceTaintRule",
        "metadata": {"name": rule_name(node, device.device), "labels": {MANAGED_BY: "gpulens"},
                     "annotations": {NODE_ANNOTATION: node, **notes}},
        "spec": {"deviceSelector": {"driver": device.driver, "pool": device.pool, "device": device.device},
                 "taint": {"key": TAINT_KEY, "value": value, "effect": effect}},
    }


def describe_error(exc: KubernetesApiError) -> str:
    return f"HTTP {exc.status}" if exc.status else exc.message
