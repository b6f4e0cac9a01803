"""Device-level quarantine: a DRA DeviceTaintRule for the failing GPU where the cluster has one, else the Node."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest

from analytics.remediation.policy import RemediationPolicy
from analytics.remediation.run import RemediationReport, apply_plan
from gpulens.core.kube_api import KubeConnection, KubernetesClient
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.failing_fleet import DEGRADING, FAILED, FailingStore

NOW = datetime(2026, 1, 4, 1, 0)
GROUP = "/apis/resource.k8s.io"
HEALED = "train-h100-0"


@pytest.fixture(scope="module")
def store(failing_store: FailingStore, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A copy of the session's analyzed fault fleet (remediate records its runs in it) and its node names."""
    path = failing_store.copy_store(tmp_path_factory.mktemp("device"))
    return path, failing_store.fleet.node_names()


def gpu_uuids(db: Path, node: str) -> list[str]:
    with duckdb.connect(str(db), read_only=True) as con:
        return [r[0] for r in con.execute("SELECT gpu_uuid FROM gpus WHERE node = ? ORDER BY gpu_index", [node]).fetchall()]


def dra_cluster(fake: FakeKubernetesApi, db: Path, nodes: list[str], *, rules_version: str | None = "v1beta2",
                slices_version: str = "v1") -> None:
    """Nodes as in the writer tests; the NVIDIA DRA driver publishes the GPUs of FAILED's node (not DEGRADING's);
    one rule of ours for a healed node and one rule of someone else's."""
    from tests.test_remediation_writer import cluster

    cluster(fake, nodes)
    served: dict[str, list[str]] = {slices_version: ["resourceslices", "resourceclaims"]}
    if rules_version is not None:
        served.setdefault(rules_version, []).append("devicetaintrules")
    fake.serve_api_group("resource.k8s.io", served)
    for node in (FAILED[0], HEALED):
        fake.put(f"{GROUP}/{slices_version}/resourceslices/{node}-gpu.nvidia.com", {
            "apiVersion": f"resource.k8s.io/{slices_version}", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com"},
            "spec": {"nodeName": node, "driver": "gpu.nvidia.com", "pool": {"name": node, "generation": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"uuid": {"string": u}, "type": {"string": "gpu"}}}
                                 for i, u in enumerate(gpu_uuids(db, node))]},
        })
    if rules_version is None:
        return
    for name, labels in ((f"gpulens-{HEALED}-gpu-1", {"app.kubernetes.io/managed-by": "gpulens"}),
                         ("ops-quarantine-gpu-1", {"team": "ops"})):
        fake.put(f"{GROUP}/{rules_version}/devicetaintrules/{name}", {
            "apiVersion": f"resource.k8s.io/{rules_version}", "kind": "DeviceTaintRule",
            "metadata": {"name": name, "labels": labels, "annotations": {"gpulens.io/node": HEALED}},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": HEALED, "device": "gpu-1"},
                     "taint": {"key": "gpulens.io/gpu-unhealthy", "value": "x", "effect": "NoSchedule"}},
        })


def run(fake: FakeKubernetesApi, db: Path, **policy: Any) -> RemediationReport:
    with KubernetesClient(KubeConnection(fake.url, {})) as api:
        return apply_plan(db, RemediationPolicy(**policy), api, clock=lambda: NOW, sleep=lambda _s: None)


def test_a_dra_gpu_is_quarantined_by_a_device_taint_rule_and_its_node_stays_untainted(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        dra_cluster(fake, db, nodes)
        report = run(fake, db)
        rule = fake.objects.get(f"{GROUP}/v1beta2/devicetaintrules/gpulens-{FAILED[0]}-gpu-{FAILED[1]}")
        node_patches = {p.path for p in fake.requests_to("PATCH", "/api/v1/nodes/")}
        failed_taints = fake.objects[f"/api/v1/nodes/{FAILED[0]}"]["spec"]["taints"]
    assert rule is not None
    assert rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": FAILED[0], "device": f"gpu-{FAILED[1]}"}
    assert rule["spec"]["taint"] == {"key": "gpulens.io/gpu-unhealthy", "value": "ecc-double-bit", "effect": "NoSchedule"}
    assert rule["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpulens"}
    assert "XID 48" in rule["metadata"]["annotations"]["gpulens.io/gpu-unhealthy-evidence"]
    assert f"/api/v1/nodes/{FAILED[0]}" not in node_patches and all(t["key"] != "gpulens.io/gpu-unhealthy"
                                                                    for t in failed_taints)
    decisions = {d.node: d for d in report.decisions}
    assert decisions[FAILED[0]].scope == "device" and "via DeviceTaintRule v1beta2" in decisions[FAILED[0]].scope_reason
    assert decisions[DEGRADING[0]].scope == "node" and "not a DRA device" in decisions[DEGRADING[0]].scope_reason
    assert f"/api/v1/nodes/{DEGRADING[0]}" in node_patches, "a device-plugin node falls back to the Node taint"
    text = report.render()
    assert "device taint: gpu.nvidia.com/" in text and "node taint:" in text


def test_release_deletes_only_the_device_taint_rules_labelled_ours(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        dra_cluster(fake, db, nodes)
        report = run(fake, db, healthy_seconds=86400)
        deletes = [r.path for r in fake.requests_to("DELETE")]
        left = sorted(p.rsplit("/", 1)[1] for p in fake.objects if "/devicetaintrules/" in p)
    outcomes = {o.node: o for o in report.outcomes}
    assert (outcomes[HEALED].action, outcomes[HEALED].status) == ("untaint", "applied")
    assert deletes == [f"{GROUP}/v1beta2/devicetaintrules/gpulens-{HEALED}-gpu-1"]
    assert "ops-quarantine-gpu-1" in left and f"gpulens-{HEALED}-gpu-1" not in left


def test_scope_device_never_falls_back_to_a_node_taint(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        dra_cluster(fake, db, nodes, rules_version=None)
        report = run(fake, db, scope="device")
        patches = fake.requests_to("PATCH")
    outcomes = {o.node: o for o in report.outcomes}
    for node in (FAILED[0], DEGRADING[0]):
        assert outcomes[node].status == "refused"
        assert "serves no DeviceTaintRule" in outcomes[node].message
    assert patches == []


def test_without_device_taint_rules_served_auto_taints_the_node_and_says_why(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        dra_cluster(fake, db, nodes, rules_version=None)
        report = run(fake, db)
    decisions = {d.node: d for d in report.decisions}
    assert decisions[FAILED[0]].scope == "node"
    assert "the API server serves no DeviceTaintRule" in decisions[FAILED[0]].scope_reason
    assert {o.node: o.status for o in report.outcomes}[FAILED[0]] == "applied"


def test_the_served_device_taint_rule_version_is_discovered_v1alpha3_on_older_clusters(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        dra_cluster(fake, db, nodes, rules_version="v1alpha3", slices_version="v1beta1")
        run(fake, db)
        applied = [p.path for p in fake.requests_to("PATCH", GROUP)]
    assert applied == [f"{GROUP}/v1alpha3/devicetaintrules/gpulens-{FAILED[0]}-gpu-{FAILED[1]}"]


def test_scope_node_taints_the_node_even_where_the_gpu_is_a_dra_device(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        dra_cluster(fake, db, nodes)
        report = run(fake, db, scope="node")
        rules = [p.path for p in fake.requests_to("PATCH", GROUP)]
    assert rules == []
    assert {d.node: d.scope_reason for d in report.decisions}[FAILED[0]] == "node taint: --scope node"
