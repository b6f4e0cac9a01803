"""A two-flavor fleet whose plan cuts and raises in each flavor, and its live ClusterQueues (plan/recommend --apply)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb

from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.recommend_cluster import CQ_V1BETA2
from tests.support.recommend_store import StoreBuilder

DAYS_15 = 15 * 288
H100, H200, GPU = "h100-80gb", "h200-141gb", "nvidia.com/gpu"
NOW = {"research": {H100: 24}, "inference": {H100: 16, H200: 8}, "batch": {H100: 6}, "training": {H200: 16}}
"""Live nominal quotas: h100 24 + 16 + 6 = 46, h200 8 + 16 = 24."""


def build_order_fleet(path: Path, nodes: dict[str, int] | None = None) -> Path:
    """research holds 24 H100s and uses 6-9 (a cut); inference is full on H100 with 8 pending (a raise) and uses
    2 of its 8 H200s (a cut); batch uses its 6 H100s; training is full on H200 with 8 pending (a raise). Each step
    is 25 %: research 24 -> 18, inference 16 -> 20 (h100) and 8 -> 6 (h200), training 16 -> 20.
    ``nodes``: 8-GPU nodes per flavor to put in the inventory (none: capacity comes from a file)."""
    s = StoreBuilder(path)
    s.quota("ClusterQueue", "research", GPU, flavor=H100, tenant="research", nominal=24,
            usage=[6 + (i % 4) for i in range(DAYS_15)])
    s.quota("ClusterQueue", "inference", GPU, flavor=H100, tenant="inference", nominal=16, usage=[16] * DAYS_15)
    s.pending("inference", GPU, dict.fromkeys(range(DAYS_15), 8.0), cluster_queue="inference", flavor=H100)
    s.quota("ClusterQueue", "inference", GPU, flavor=H200, tenant="inference", nominal=8, usage=[2] * DAYS_15)
    s.quota("ClusterQueue", "batch", GPU, flavor=H100, tenant="batch", nominal=6, usage=[6] * DAYS_15)
    s.quota("ClusterQueue", "training", GPU, flavor=H200, tenant="training", nominal=16, usage=[16] * DAYS_15)
    s.pending("training", GPU, dict.fromkeys(range(DAYS_15), 8.0), cluster_queue="training", flavor=H200)
    s.save()
    with duckdb.connect(str(path)) as con:
        for flavor, count in (nodes or {}).items():
            for n in range(count):
                node = f"gpu-{flavor}-{n}"
                con.execute("INSERT INTO nodes (node, pool, gpu_model) VALUES (?, ?, 'H100')", [node, flavor])
                con.executemany(
                    "INSERT INTO devices (device_id, gpu_uuid, node, gpu_model, kind, profile, gpu_equivalents, "
                    "memory_total_bytes, sharing_mode) VALUES (?, ?, ?, 'H100', 'gpu', 'gpu', 1.0, 0, 'exclusive')",
                    [[f"GPU-{node}-{g}", f"GPU-{node}-{g}", node] for g in range(8)])
    return path


def live_queue(name: str, quotas: dict[str, int]) -> dict[str, Any]:
    """A ClusterQueue with a CPU quota beside the GPU quota of each flavor in ``quotas``."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"cohortName": "ai-factory", "resourceGroups": [{
            "coveredResources": ["cpu", GPU],
            "flavors": [{"name": f, "resources": [{"name": "cpu", "nominalQuota": 64},
                                                  {"name": GPU, "nominalQuota": n}]} for f, n in quotas.items()],
        }]},
        "status": {"pendingWorkloads": 0},
    }


def put_live_queues(fake: FakeKubernetesApi) -> None:
    for name, quotas in NOW.items():
        fake.put(f"{CQ_V1BETA2}/{name}", live_queue(name, quotas))


def written(fake: FakeKubernetesApi) -> list[tuple[str, dict[str, int]]]:
    """Per PATCH in the order sent: the queue and the GPU quotas its body carries, per flavor."""
    out = []
    for r in fake.requests_to("PATCH", CQ_V1BETA2):
        flavors = r.body["spec"]["resourceGroups"][0]["flavors"]
        out.append((r.path.rsplit("/", 1)[1],
                    {f["name"]: res["nominalQuota"] for f in flavors for res in f["resources"] if res["name"] == GPU}))
    return out
