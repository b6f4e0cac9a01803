"""A store and matching live quota objects for the writer tests (recommend -> dry run / apply)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.recommend_store import StoreBuilder

WEEK = 7 * 288
CUT_HISTORY = 15 * 288
CQ_V1BETA2 = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues"
RQ_PATH = "/api/v1/namespaces/ns-c/resourcequotas/gpu-quota"


def build_writer_store(path: Path, *, snapshot_opt_out: bool = False) -> Path:
    """team-a: confident cut 16 -> 12 (recommended 9); team-b: confident cut; team-c: one day only, an
    increase 16 -> 20 for work that waited (low confidence); ResourceQuota ns-c/gpu-quota: 8 -> 6
    (recommended 3). Cuts stand on 15 days of quota history (a cut needs 14, ``--min-cut-days``)."""
    s = StoreBuilder(path)
    before = WEEK - CUT_HISTORY  # the quota history starts 8 days before the workloads' week
    s.quota("ClusterQueue", "team-a", "nvidia.com/gpu", flavor="h100", tenant="team-a", nominal=16,
            borrowing_limit=4, lending_limit=2, usage=[4 + (i % 4) for i in range(CUT_HISTORY)], first=before)
    s.quota("ClusterQueue", "team-b", "nvidia.com/gpu", flavor="h100", tenant="team-b", nominal=16,
            usage=[4] * CUT_HISTORY, annotations={"gpulens.io/auto-apply": "false"} if snapshot_opt_out else None,
            first=before)
    s.quota("ClusterQueue", "team-c", "nvidia.com/gpu", flavor="h100", tenant="team-c", nominal=16,
            usage=[18] * 288, first=WEEK - 288)
    s.pending("team-c", "nvidia.com/gpu", {i: 2 for i in range(WEEK - 288, WEEK)}, cluster_queue="team-c")
    s.quota("ResourceQuota", "gpu-quota", "requests.nvidia.com/gpu", namespace="ns-c", tenant="team-c",
            nominal=8, usage=[2] * CUT_HISTORY, first=before)
    return s.save()


def live_cluster_queue(name: str, gpus: int = 16, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A ClusterQueue as a platform team writes it: CPU/memory too, limits, a second flavor."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name, "annotations": annotations or {"owner": "platform"}},
        "spec": {
            "cohortName": "ai-factory",
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {"name": "h100", "resources": [
                            {"name": "cpu", "nominalQuota": 100},
                            {"name": "memory", "nominalQuota": "400Gi"},
                            {"name": "nvidia.com/gpu", "nominalQuota": gpus, "borrowingLimit": 4, "lendingLimit": 2},
                        ]},
                        {"name": "h100-spot", "resources": [
                            {"name": "cpu", "nominalQuota": 10},
                            {"name": "memory", "nominalQuota": "40Gi"},
                            {"name": "nvidia.com/gpu", "nominalQuota": 2},
                        ]},
                    ],
                }
            ],
        },
        "status": {"pendingWorkloads": 0},
    }


def live_resource_quota() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "gpu-quota", "namespace": "ns-c"},
        "spec": {"hard": {"requests.nvidia.com/gpu": "8", "requests.cpu": "64", "pods": "100"}},
    }


def gpu_nominal(body: dict[str, Any], flavor: str) -> int:
    """The ``nvidia.com/gpu`` nominalQuota of ``flavor`` in a ClusterQueue body."""
    return next(r["nominalQuota"] for g in body["spec"]["resourceGroups"] for f in g["flavors"] if f["name"] == flavor
                for r in f["resources"] if r["name"] == "nvidia.com/gpu")
