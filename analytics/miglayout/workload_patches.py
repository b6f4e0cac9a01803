"""Per workload owner, the manifest change that swaps a whole GPU for a MIG instance.

Device plugin (mixed strategy): the containers that held GPUs ask for ``nvidia.com/mig-<profile>``
instead of what they ask for today (``nvidia.com/gpu`` or another MIG profile; a strategic merge
patch, where ``null`` removes the old key). With DRA
(``resource.k8s.io/v1``, Kubernetes 1.34+): a ``ResourceClaimTemplate`` asks the NVIDIA DRA driver's
``mig.nvidia.com`` device class for one device whose ``gpu.nvidia.com`` ``profile`` attribute is the
profile (a CEL selector), and the pod template references it. Built-in kinds get a patch for
``kubectl patch --type strategic``; custom resources (JobSet, RayCluster, ...) cannot be merged into by
list position, so their file holds the same container change to make in the manifest, with the path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from analytics.miglayout.fleet import InstanceDemand

GPU_RESOURCE = "nvidia.com/gpu"
DRA_DEVICE_CLASS = "mig.nvidia.com"
DRA_ATTRIBUTE_DOMAIN = "gpu.nvidia.com"
CLAIM_NAME = "mig"

POD_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
"""Built-in owners and where their pod spec lives: these get a strategic merge patch."""

MANIFEST_PATHS: dict[str, str] = {
    "JobSet": "spec.replicatedJobs[*].template.spec.template.spec",
    "RayCluster": "spec.headGroupSpec.template.spec and spec.workerGroupSpecs[*].template.spec",
    "RayJob": "spec.rayClusterSpec.workerGroupSpecs[*].template.spec",
    "PyTorchJob": "spec.pytorchReplicaSpecs.<Master|Worker>.template.spec",
    "LeaderWorkerSet": "spec.leaderWorkerTemplate.workerTemplate.spec",
    "Pod": "spec (a pod's resources cannot be changed: recreate it)",
}

_API_VERSIONS = {"Deployment": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1",
                 "ReplicaSet": "apps/v1", "Job": "batch/v1", "CronJob": "batch/v1"}


def mig_resource(profile: str) -> str:
    """The device plugin's resource name of a profile under the mixed strategy."""
    return f"nvidia.com/mig-{profile}"


@dataclass(frozen=True)
class WorkloadPatch:
    """The files for one workload: the patch (or manifest change) and, with DRA, its claim template."""

    demand: InstanceDemand
    file_stem: str
    header: str
    body: dict[str, Any]
    claim_template: dict[str, Any] | None = None


def file_stem(demand: InstanceDemand) -> str:
    """``<kind>-<namespace>-<name>``, lower case, safe as a file name, unique per workload."""
    raw = f"{demand.kind}-{demand.namespace}-{demand.name}".lower()
    safe = re.sub(r"[^a-z0-9.-]+", "-", raw).strip("-.")[:180]
    if safe != raw:
        safe += "-" + hashlib.sha256(demand.workload.encode()).hexdigest()[:6]
    return safe


def claim_template_name(demand: InstanceDemand) -> str:
    """A DNS-1123 name for the workload's ResourceClaimTemplate."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"{demand.name}-{demand.profile}".lower()).strip("-")
    digest = hashlib.sha256(demand.workload.encode()).hexdigest()[:6]
    return f"{base[:56].rstrip('-')}-{digest}"


def current_resource(demand: InstanceDemand) -> str:
    """The extended resource the workload asks for today."""
    return GPU_RESOURCE if demand.current_profile == "gpu" else mig_resource(demand.current_profile)


def _containers(demand: InstanceDemand, dra: bool) -> list[dict[str, Any]]:
    names = demand.containers or ("CONTAINER",)
    out = []
    for i, name in enumerate(names):
        # One instance per pod: the first container that held a GPU takes it, the others give theirs back.
        change: dict[str, Any] = {current_resource(demand): None}
        if not dra and i == 0:
            change[mig_resource(demand.profile)] = "1"
        resources: dict[str, Any] = {"limits": dict(change), "requests": dict(change)}
        if dra and i == 0:
            resources["claims"] = [{"name": CLAIM_NAME}]
        out.append({"name": name, "resources": resources})
    return out


def _pod_spec_change(demand: InstanceDemand, dra: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": _containers(demand, dra)}
    if dra:
        spec["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": claim_template_name(demand)}]
    return spec


def _nest(path: tuple[str, ...], leaf: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = leaf
    for key in reversed(path):
        out = {key: out}
    return out


def resource_claim_template(demand: InstanceDemand) -> dict[str, Any]:
    """A ``resource.k8s.io/v1`` ResourceClaimTemplate for one MIG instance of the demand's profile."""
    expression = f"device.attributes['{DRA_ATTRIBUTE_DOMAIN}'].profile == '{demand.profile}'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": claim_template_name(demand), "namespace": demand.namespace,
                     "labels": {"app.kubernetes.io/managed-by": "gpulens"}},
        "spec": {"spec": {"devices": {"requests": [{
            "name": CLAIM_NAME,
            "exactly": {"deviceClassName": DRA_DEVICE_CLASS, "count": 1, "selectors": [{"cel": {"expression": expression}}]},
        }]}}},
    }


def workload_patch(demand: InstanceDemand, *, dra: bool = False) -> WorkloadPatch:
    """The patch (or manifest change) that moves one workload to its recommended MIG profile."""
    pod_spec = _pod_spec_change(demand, dra)
    claim = resource_claim_template(demand) if dra else None
    what = (f"{demand.kind} {demand.namespace}/{demand.name} [{demand.tenant}]: {current_resource(demand)} -> "
            + (f"a ResourceClaimTemplate for {demand.profile} (DRA)" if dra else mig_resource(demand.profile)))
    if demand.kind in POD_TEMPLATE_PATHS:
        body = _nest(POD_TEMPLATE_PATHS[demand.kind], pod_spec)
        how = (f"kubectl patch {demand.kind.lower()} {demand.name} -n {demand.namespace} --type strategic "
               f"--patch-file FILE")
        if dra:
            how = f"kubectl apply -f the .resourceclaimtemplate.yaml beside it, then {how}"
    else:
        path = MANIFEST_PATHS.get(demand.kind, "the pod template(s) of this kind")
        body = {"containers": pod_spec["containers"]}
        if dra:
            body["resourceClaims"] = pod_spec["resourceClaims"]
        how = f"not a kubectl patch: make this change in the manifest, under {path}"
    header = f"# {what}\n# How: {how}\n"
    if demand.pending:
        header += f"# Pending work: {demand.pending}.\n"
    if not demand.containers:
        header += "# The store recorded no container name: replace CONTAINER with the one that uses the GPU.\n"
    return WorkloadPatch(demand, file_stem(demand), header, body, claim)


def rollback_patch(demand: InstanceDemand, *, dra: bool = False) -> WorkloadPatch:
    """The patch (or manifest change) that puts one workload back on what it asks for today."""
    back = dataclasses.replace(demand, profile=demand.current_profile, current_profile=demand.profile)
    names = demand.containers or ("CONTAINER",)
    containers = []
    for i, name in enumerate(names):
        change: dict[str, Any] = {} if dra else {mig_resource(demand.profile): None}
        if i == 0:
            change[current_resource(demand)] = str(demand.current_per_pod)
        resources: dict[str, Any] = {"limits": dict(change), "requests": dict(change)}
        if dra and i == 0:
            resources["claims"] = None
        containers.append({"name": name, "resources": resources})
    spec: dict[str, Any] = {"containers": containers}
    if dra:
        spec["resourceClaims"] = None
    what = (f"ROLLBACK {demand.kind} {demand.namespace}/{demand.name} [{demand.tenant}]: back to "
            f"{current_resource(demand)}: {demand.current_per_pod} per pod, as today")
    if demand.kind in POD_TEMPLATE_PATHS:
        body = _nest(POD_TEMPLATE_PATHS[demand.kind], spec)
        how = (f"kubectl patch {demand.kind.lower()} {demand.name} -n {demand.namespace} --type strategic "
               "--patch-file FILE")
    else:
        body = dict(spec)
        how = f"not a kubectl patch: make this change in the manifest, under {MANIFEST_PATHS.get(demand.kind, 'the pod template(s)')}"
    return WorkloadPatch(back, f"{file_stem(demand)}.rollback", f"# {what}\n# How: {how}\n", body)


def api_version(kind: str) -> str | None:
    """The API version of a built-in owner kind (for validating a patched object)."""
    return _API_VERSIONS.get(kind)
