"""Device or node: how each candidate would be quarantined, and why (``--scope auto|device|node``).

``auto`` quarantines the failing GPU alone (a DRA ``DeviceTaintRule``) where the API server serves
DeviceTaintRules and every failing GPU of the node is a DRA device in the node's ResourceSlices; else
the Node taint (device-plugin nodes). ``device`` never falls back (the node gets no quarantine, with
the reason); ``node`` always taints the Node. A dry run reads no cluster, so it cannot know DRA devices.
"""

from __future__ import annotations

from dataclasses import dataclass

from analytics.remediation.device_rules import DraApi, DraDevice, describe_error, node_devices
from gpulens.core.kube_api import KubernetesApiError, KubernetesReads


@dataclass(frozen=True)
class ScopeChoice:
    scope: str
    """``device``, ``node`` or ``none`` (``--scope device`` where no device can be tainted)."""
    reason: str
    devices: tuple[DraDevice, ...] = ()


def _fallback(wanted: str, why: str) -> ScopeChoice:
    if wanted == "device":
        return ScopeChoice("none", f"--scope device: {why}; the Node is not tainted instead")
    return ScopeChoice("node", f"node taint: {why}")


def dry_run_scope(wanted: str) -> ScopeChoice:
    if wanted == "node":
        return ScopeChoice("node", "node taint: --scope node")
    return _fallback(wanted, "a dry run reads no cluster, so DRA devices are unknown (--apply looks them up)")


def live_scope(api: KubernetesReads, dra: DraApi, wanted: str, node: str, gpus: tuple[str, ...]) -> ScopeChoice:
    """The scope of one node's quarantine, from the live ResourceSlices."""
    if wanted == "node":
        return ScopeChoice("node", "node taint: --scope node")
    if dra.rules is None or dra.slices is None:
        return _fallback(wanted, "the API server serves no DeviceTaintRule (resource.k8s.io)")
    if not gpus:
        return _fallback(wanted, "the evidence names no failing GPU")
    try:
        published = node_devices(api, dra, node)
    except KubernetesApiError as exc:
        return _fallback(wanted, f"cannot list the node's ResourceSlices ({describe_error(exc)})")
    found = tuple(d for d in published if d.gpu_uuid in gpus)
    missing = [g for g in gpus if not any(d.gpu_uuid == g for d in found)]
    if missing:
        return _fallback(wanted, f"{missing[0]} is not a DRA device (device plugin)")
    refs = ", ".join(d.ref for d in found)
    return ScopeChoice("device", f"device taint: {refs} via DeviceTaintRule {dra.rules}", found)
