"""`remediate --apply` against the FakeKubernetesApi: taints by server-side apply, 409, 403, opt-out, caps, RBAC."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpulens.analytics.remediation.policy import RemediationPolicy
from gpulens.analytics.remediation.run import apply_plan
from gpulens.exporter.kube_api import KubeConnection, KubernetesClient
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.failing_fleet import DEGRADING, FAILED, FailingStore
from tests.support.rbac import allowing, granted, permission, role_rules

NOW = datetime(2026, 1, 4, 1, 0)
RBAC_FILE = Path(__file__).parents[1] / "deploy/rbac/gpulens-remediator.yaml"


@pytest.fixture(scope="module")
def store(failing_store: FailingStore) -> tuple[Path, list[str]]:
    """The session's analyzed fault fleet (read-only) and its node names."""
    return failing_store.path, failing_store.fleet.node_names()


def cluster(api: FakeKubernetesApi, nodes: list[str], annotate: dict[str, dict[str, str]] | None = None) -> None:
    items = []
    for n in nodes:
        obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                               "metadata": {"name": n, "annotations": (annotate or {}).get(n, {})},
                               "spec": {"taints": [{"key": "other.io/maintenance", "effect": "NoSchedule"}]}}
        api.put(f"/api/v1/nodes/{n}", obj)
        items.append(api.objects[f"/api/v1/nodes/{n}"])
    api.objects["/api/v1/nodes"] = {"kind": "NodeList", "items": items}


def run(fake: FakeKubernetesApi, db: Path, **policy: Any):  # type: ignore[no-untyped-def]
    with KubernetesClient(KubeConnection(fake.url, {})) as api:
        return apply_plan(db, RemediationPolicy(**policy), api, clock=lambda: NOW, sleep=lambda _s: None)


def test_apply_taints_each_candidate_node_by_server_side_apply_with_evidence(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        report = run(fake, db)
        patches = fake.requests_to("PATCH")
    outcomes = {o.node: o for o in report.outcomes}
    assert {n for n, o in outcomes.items() if o.status == "applied"} == {FAILED[0], DEGRADING[0]}
    assert {p.path for p in patches} == {f"/api/v1/nodes/{FAILED[0]}", f"/api/v1/nodes/{DEGRADING[0]}"}
    for p in patches:
        assert p.query["fieldManager"] == "gpulens" and p.headers["content-type"] == "application/apply-patch+yaml"
        assert p.body["metadata"]["resourceVersion"], "optimistic concurrency"
        assert p.body["spec"]["taints"][0]["key"] == "gpulens.io/gpu-unhealthy"
        assert "rising since" in p.body["metadata"]["annotations"]["gpulens.io/gpu-unhealthy-evidence"]


def test_a_409_is_retried_after_reading_the_node_again(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        fake.fail("PATCH", f"/api/v1/nodes/{FAILED[0]}", 409, "the object has been modified")
        report = run(fake, db)
        gets = [r for r in fake.requests_to("GET") if r.path == f"/api/v1/nodes/{FAILED[0]}"]
    (o,) = [o for o in report.outcomes if o.node == FAILED[0]]
    assert (o.status, o.attempts) == ("applied", 2) and len(gets) == 2


def test_a_403_says_which_rbac_to_grant_and_the_other_node_still_gets_its_outcome(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        fake.fail("PATCH", f"/api/v1/nodes/{FAILED[0]}", 403, 'nodes "x" is forbidden: cannot patch')
        report = run(fake, db)
    outcomes = {o.node: o for o in report.outcomes}
    assert outcomes[FAILED[0]].status == "failed"
    assert "deploy/rbac/gpulens-remediator.yaml" in outcomes[FAILED[0]].message
    assert outcomes[DEGRADING[0]].status == "applied"


def test_an_opted_out_node_is_left_alone_and_a_tainted_node_counts_against_the_cap(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes, {FAILED[0]: {"gpulens.io/remediate": "false"}})
        other = "serve-h200-0"
        node = fake.objects[f"/api/v1/nodes/{other}"]
        node["spec"]["taints"].append({"key": "gpulens.io/gpu-unhealthy", "value": "x", "effect": "NoSchedule"})
        fake.objects["/api/v1/nodes"]["items"] = [fake.objects[f"/api/v1/nodes/{n}"] for n in nodes]
        report = run(fake, db, healthy_seconds=4 * 86400)
        patched = {p.path for p in fake.requests_to("PATCH")}
    outcomes = {o.node: o for o in report.outcomes}
    assert outcomes[FAILED[0]].status == "skipped" and "opted out" in outcomes[FAILED[0]].message
    assert outcomes[DEGRADING[0]].status == "refused" and "cap" in outcomes[DEGRADING[0]].message
    assert outcomes[other].action == "keep", "ours, not a candidate, but not yet healthy for 4 days"
    assert patched == set()


def test_a_node_healthy_for_the_whole_period_is_untainted_leaving_other_taints_alone(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        healed = "train-h100-0"
        fake.objects[f"/api/v1/nodes/{healed}"]["spec"]["taints"].append(
            {"key": "gpulens.io/gpu-unhealthy", "value": "x", "effect": "NoSchedule"})
        report = run(fake, db, healthy_seconds=86400)
        (patch,) = [p for p in fake.requests_to("PATCH") if p.path.endswith(healed)]
    outcomes = {o.node: o for o in report.outcomes}
    assert (outcomes[healed].action, outcomes[healed].status) == ("untaint", "applied")
    assert "spec" not in patch.body, "the apply body owns no taint any more: server-side apply removes only ours"


def test_every_request_is_allowed_by_the_rbac_and_every_granted_verb_is_used(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        run(fake, db)
        needs = {permission(r) for r in fake.requests}
    rules = role_rules(yaml.safe_load_all(RBAC_FILE.read_text()))
    for need in needs:
        assert allowing(rules, need), f"{need} is not granted by {RBAC_FILE.name}"
    assert granted(rules) == {(n.api_group, n.resource, n.verb) for n in needs}
