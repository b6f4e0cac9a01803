"""``collect --kubernetes`` keeps pods that ask for part of a GPU, with their share (FakeKubernetesApi, real HTTP)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from collector.inventory import collect_inventory
from collector.store import Store
from gpulens.core.kube_api import KubernetesClient
from tests.fakes.kubernetes_api import FakeKubernetesApi

NOW = 1_790_000_000.0
GIB = 2**30


def _pod(name: str, limits: dict[str, str], *, annotations: dict[str, str] | None = None,
         phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"namespace": "share", "name": name, "uid": f"uid-{name}", "annotations": annotations or {}},
            "spec": {"nodeName": None if phase == "Pending" else "gpu-1",
                     "containers": [{"name": "main", "resources": {"limits": limits}}]},
            "status": {"phase": phase}}


PODS = [
    _pod("hami-30", {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "10240"}),
    _pod("kai-half", {}, annotations={"gpu-fraction": "0.5"}),
    _pod("milli-470", {"alibabacloud.com/gpu-milli": "470", "alibabacloud.com/gpu-count": "1"}),
    _pod("gpushare-8g", {"aliyun.com/gpu-mem": "8"}, phase="Pending"),
    _pod("whole", {"nvidia.com/gpu": "1"}, phase="Pending"),
    _pod("cpu-only", {"cpu": "4"}),
]


def test_fractional_pods_are_kept_with_their_share_per_gpu(tmp_path: Path) -> None:
    with FakeKubernetesApi() as fake:
        for path in ("/api/v1/namespaces", "/api/v1/nodes", "/api/v1/resourcequotas",
                     "/apis/networking.k8s.io/v1/networkpolicies"):
            fake.objects[path] = {"kind": "List", "items": []}
        fake.objects["/api/v1/pods"] = {"kind": "List", "items": PODS}
        with Store(str(tmp_path / "s.duckdb")) as store:
            collect_inventory(store, KubernetesClient(fake.url), clock=lambda: NOW)
            rows = {pod: (phase, json.loads(req)) for pod, phase, req in
                    store.query("SELECT pod, phase, gpu_requests FROM pod_snapshots")}
    assert rows == {
        "hami-30": ("Running", {"nvidia.com/gpu": 1.0, "nvidia.com/gpucores": 30.0, "nvidia.com/gpumem": 10240.0,
                                "gpulens.io/gpu-share": 0.3, "gpulens.io/gpu-share-memory-bytes": 10240.0 * 2**20}),
        "kai-half": ("Running", {"gpu-fraction": 0.5, "gpulens.io/gpu-share": 0.5}),
        "milli-470": ("Running", {"alibabacloud.com/gpu-milli": 470.0, "alibabacloud.com/gpu-count": 1.0,
                                  "gpulens.io/gpu-share": 0.47}),
        "gpushare-8g": ("Pending", {"aliyun.com/gpu-mem": 8.0, "gpulens.io/gpu-share-memory-bytes": 8.0 * GIB}),
        "whole": ("Pending", {"nvidia.com/gpu": 1.0}),
    }
