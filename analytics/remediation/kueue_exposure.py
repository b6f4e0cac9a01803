"""What Kueue may do when a Node is tainted: the topology-aware (TAS) workloads running pods on it.

With Kueue's ``TASReplaceNodeOnNodeTaints`` feature (beta since Kueue 0.17), a NoSchedule or NoExecute
Node taint that the pods of a TAS-admitted workload do not tolerate makes Kueue evict the workload and
place it again elsewhere. Kueue labels the pods of a PodSet admitted by TAS ``kueue.x-k8s.io/tas: "true"``
and propagates the admitted Workload's name in the annotation ``kueue.x-k8s.io/workload``; the pods on
the Node (one list, ``fieldSelector=spec.nodeName``) name the workloads at stake.
"""

from __future__ import annotations

from collections import Counter

from analytics.remediation.device_rules import describe_error
from gpulens.core.kube_api import KubernetesApiError, KubernetesReads

TAS_LABEL = "kueue.x-k8s.io/tas"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
PODS = "/api/v1/pods"


def tas_workloads(api: KubernetesReads, node: str) -> Counter[str]:
    """``namespace/workload`` -> pods it runs on ``node`` (running or pending), for TAS-admitted pods."""
    listing = api.get(PODS, {"fieldSelector": f"spec.nodeName={node}", "labelSelector": f"{TAS_LABEL}=true"})
    out: Counter[str] = Counter()
    for pod in listing.get("items") or []:
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get(TAS_LABEL) != "true":
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        workload = (meta.get("annotations") or {}).get(WORKLOAD_ANNOTATION) or f"pod {meta.get('name', '')}"
        out[f"{meta.get('namespace', '')}/{workload}"] += 1
    return out


def exposure_note(api: KubernetesReads, node: str) -> str:
    """One clause for the outcome line: which Kueue TAS workloads a Node taint may get evicted and re-placed."""
    try:
        workloads = tas_workloads(api, node)
    except KubernetesApiError as exc:
        return f"; Kueue TAS workloads on it unknown (cannot list its pods: {describe_error(exc)})"
    if not workloads:
        return "; no Kueue TAS workload runs on it"
    names = ", ".join(f"{w} ({n} pod{'s' if n > 1 else ''})" for w, n in sorted(workloads.items()))
    return (f"; Kueue may evict and re-place {len(workloads)} TAS workload(s) running on it "
            f"(TASReplaceNodeOnNodeTaints): {names}")
