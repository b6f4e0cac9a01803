"""Multi-node jobs are one workload: LeaderWorkerSet and pod-group labels group pods the owner chain splits."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from collector.backfill import backfill_simulated
from collector.inventory import CORE_LISTS, collect_inventory
from collector.store import Store
from gpulens.core.kube_api import KubernetesClient
from gpulens.core.tenancy.gangs import gang_of
from tests.fakes.kubernetes_api import FakeKubernetesApi

NOW = 1_790_000_000.0
END = 1_780_000_200.0


@pytest.mark.parametrize(("labels", "owner", "want"), [
    ({"leaderworkerset.sigs.k8s.io/name": "vllm"}, "StatefulSet", ("LeaderWorkerSet", "vllm")),
    ({"leaderworkerset.sigs.k8s.io/name": "vllm"}, "Pod", ("LeaderWorkerSet", "vllm")),  # a worker: owned by the leader
    ({"kueue.x-k8s.io/pod-group-name": "g1"}, "Pod", ("Workload", "g1")),
    ({"scheduling.x-k8s.io/pod-group": "pg"}, "Job", ("PodGroup", "pg")),
    ({"pod-group.scheduling.sigs.k8s.io": "old"}, "StatefulSet", ("PodGroup", "old")),
    ({"scheduling.x-k8s.io/pod-group": "pg"}, "PyTorchJob", None),  # the owner already is the whole job
    ({"scheduling.x-k8s.io/pod-group": ""}, "Job", None),
    ({}, "Pod", None),
])
def test_gang_labels_name_the_job(labels: dict[str, str], owner: str, want: tuple[str, str] | None) -> None:
    assert gang_of(labels, owner) == want


def _pod(name: str, labels: dict[str, str], owner: tuple[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "ml", "name": name, "uid": f"uid-{name}", "labels": labels}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return {"metadata": meta, "spec": {"nodeName": "n1", "containers": [
        {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}, "status": {"phase": "Running"}}


LWS = {"leaderworkerset.sigs.k8s.io/name": "llama-serve"}
PODS = [
    _pod("llama-serve-0", LWS, ("StatefulSet", "llama-serve")),        # leader, owned by the LWS's StatefulSet
    _pod("llama-serve-0-1", LWS, ("StatefulSet", "llama-serve-0")),    # worker, its StatefulSet owned by the leader
    _pod("plain-a", {"kueue.x-k8s.io/pod-group-name": "sweep"}, None),
    _pod("plain-b", {"kueue.x-k8s.io/pod-group-name": "sweep"}, None),
    _pod("pg-0", {"scheduling.x-k8s.io/pod-group": "mpi-gang"}, ("Job", "mpi-launcher")),
    _pod("torch-0", {"scheduling.x-k8s.io/pod-group": "torch"}, ("PyTorchJob", "torch")),
    _pod("lonely", {}, ("Job", "lonely")),
]


def test_the_inventory_groups_pods_by_their_gang_labels(tmp_path: Path) -> None:
    with FakeKubernetesApi() as fake, Store(str(tmp_path / "s.duckdb")) as store:
        for path in CORE_LISTS.values():  # an empty cluster but for the pods; no Kueue installed (404)
            fake.objects[path] = {"kind": "List", "items": PODS if path == CORE_LISTS["pods"] else []}
        collect_inventory(store, KubernetesClient(fake.url), clock=lambda: NOW)
        rows = dict(((p), (k, n)) for p, k, n in store.query(
            "SELECT pod, workload_kind, workload_name FROM pod_snapshots"))
    assert rows == {
        "llama-serve-0": ("LeaderWorkerSet", "llama-serve"), "llama-serve-0-1": ("LeaderWorkerSet", "llama-serve"),
        "plain-a": ("Workload", "sweep"), "plain-b": ("Workload", "sweep"),
        "pg-0": ("PodGroup", "mpi-gang"), "torch-0": ("PyTorchJob", "torch"), "lonely": ("Job", "lonely"),
    }


def test_placement_takes_the_inventorys_group_over_split_owners(tmp_path: Path) -> None:
    """An exporter that sees each pod's StatefulSet splits a LeaderWorkerSet; the pod inventory joins it again."""
    db = tmp_path / "fleet.duckdb"
    backfill_simulated(str(db), start=END - 6 * 3600, end=END, step=300)
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE allocation_claims SET workload_kind = 'StatefulSet', workload_name = pod "
                    "WHERE workload_name = 'gpt-pretrain'")
    split = tmp_path / "split.duckdb"
    shutil.copy(db, split)
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE pod_snapshots SET workload_kind = 'LeaderWorkerSet' WHERE workload_name = 'gpt-pretrain'")
    for store in (db, split):
        analyze(store, AnalysisSettings(window_seconds="6h"))

    def block_rows(store: Path) -> list[tuple[Any, ...]]:
        with duckdb.connect(str(store), read_only=True) as con:
            return con.execute("SELECT workload_kind, workload, devices, domains_spanned, min_domains FROM placement "
                               "WHERE level = 'block' AND devices = 16 AND namespace = 'foundation'").fetchall()

    assert block_rows(db) == [("LeaderWorkerSet", "gpt-pretrain", 16, 2, 1)]
    assert block_rows(split) == []  # without the inventory's labels: eight 2-GPU StatefulSet pods, none spread
