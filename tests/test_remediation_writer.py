"""`remediate --apply` against the FakeKubernetesApi: Node taints by read-modify-write that keep everything else."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from analytics.remediation.policy import RemediationPolicy
from analytics.remediation.run import RemediationReport, apply_plan
from gpulens.core.kube_api import KubeConnection, KubernetesClient
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.failing_fleet import DEGRADING, FAILED, FailingStore
from tests.support.rbac import allowing, granted, permission, role_rules

NOW = datetime(2026, 1, 4, 1, 0)
RBAC_FILE = Path(__file__).parents[1] / "deploy/rbac/gpulens-remediator.yaml"
OURS = "gpulens.io/gpu-unhealthy"
THEIRS = [{"key": "dedicated", "value": "llm", "effect": "NoSchedule"},
          {"key": "nvidia.com/gpu.operator", "value": "upgrading", "effect": "PreferNoSchedule"}]


@pytest.fixture(scope="module")
def store(failing_store: FailingStore) -> tuple[Path, list[str]]:
    """The session's analyzed fault fleet (read-only) and its node names."""
    return failing_store.path, failing_store.fleet.node_names()


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{name}"


def cluster(api: FakeKubernetesApi, nodes: list[str], annotate: dict[str, dict[str, str]] | None = None) -> None:
    """Every Node with taints, labels and annotations of others (a dedicated pool, the GPU Operator)."""
    for n in nodes:
        api.put(node_path(n), {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n, "labels": {"pool": "gpu", "kubernetes.io/hostname": n},
                         "annotations": {"team.io/owner": "platform", **(annotate or {}).get(n, {})}},
            "spec": {"taints": [dict(t) for t in THEIRS]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        })


def run(fake: FakeKubernetesApi, db: Path, **policy: Any) -> RemediationReport:
    with KubernetesClient(KubeConnection(fake.url, {})) as api:
        return apply_plan(db, RemediationPolicy(**policy), api, clock=lambda: NOW, sleep=lambda _s: None)


def taints(fake: FakeKubernetesApi, node: str) -> list[dict[str, Any]]:
    return list((fake.objects[node_path(node)].get("spec") or {}).get("taints") or [])


def test_tainting_keeps_every_other_taint_label_and_annotation_of_the_node(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        report = run(fake, db)
        patches = fake.requests_to("PATCH")
        stored = {n: fake.objects[node_path(n)] for n in (FAILED[0], DEGRADING[0])}
    outcomes = {o.node: o for o in report.outcomes}
    assert {n for n, o in outcomes.items() if o.status == "applied"} == {FAILED[0], DEGRADING[0]}
    for node in stored.values():
        assert node["spec"]["taints"][:2] == THEIRS, "the dedicated-pool and GPU Operator taints survive"
        assert [t["key"] for t in node["spec"]["taints"]] == ["dedicated", "nvidia.com/gpu.operator", OURS]
        assert node["metadata"]["labels"] == {"pool": "gpu", "kubernetes.io/hostname": node["metadata"]["name"]}
        assert node["metadata"]["annotations"]["team.io/owner"] == "platform"
        assert "rising since" in node["metadata"]["annotations"]["gpulens.io/gpu-unhealthy-evidence"]
    for p in patches:
        assert p.headers["content-type"] == "application/merge-patch+json"
        assert p.body["metadata"]["resourceVersion"], "the read resourceVersion is the precondition"
        assert len(p.body["spec"]["taints"]) == 3, "the whole list goes back, not only our entry"


def test_a_second_run_keeps_the_taint_and_changes_nothing_else(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        run(fake, db)
        before = taints(fake, FAILED[0])
        report = run(fake, db)
        after = taints(fake, FAILED[0])
    assert {o.node: o.status for o in report.outcomes}[FAILED[0]] == "unchanged"
    assert before == after and len(after) == 3


def test_retainting_a_node_whose_taint_was_changed_rewrites_only_our_entry(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        fake.objects[node_path(FAILED[0])]["spec"]["taints"].insert(1, {"key": OURS, "value": "old", "effect": "NoSchedule"})
        with KubernetesClient(KubeConnection(fake.url, {})) as api:
            from analytics.remediation.apply import TaintApplier
            from analytics.remediation.decide import Decision
            from analytics.remediation.plan import load_inputs

            inputs = load_inputs(db)
            outcome = TaintApplier(api, clock=lambda: NOW).apply(
                Decision(FAILED[0], "train-h100", "taint", "drain"), inputs.evidence[FAILED[0]], inputs.window,
                inputs.run_id)
        after = taints(fake, FAILED[0])
    assert outcome.status == "applied"
    assert after == [THEIRS[0], {"key": OURS, "value": "ecc-double-bit", "effect": "NoSchedule"}, THEIRS[1]]


def test_untainting_removes_only_our_taint_and_our_annotations(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    healed = "train-h100-0"
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        node = fake.objects[node_path(healed)]
        node["spec"]["taints"].append({"key": OURS, "value": "x", "effect": "NoSchedule"})
        node["metadata"]["annotations"] |= {"gpulens.io/gpu-unhealthy-evidence": "old", "gpulens.io/tainted-at":
                                            "2026-01-01T00:00:00Z"}
        report = run(fake, db, healthy_seconds=86400)
        node = fake.objects[node_path(healed)]
    outcomes = {o.node: o for o in report.outcomes}
    assert (outcomes[healed].action, outcomes[healed].status) == ("untaint", "applied")
    assert node["spec"]["taints"] == THEIRS
    assert node["metadata"]["annotations"] == {"team.io/owner": "platform"}
    assert node["metadata"]["labels"]["pool"] == "gpu"


def test_the_fake_is_faithful_the_old_apply_bodies_would_wipe_every_other_taint() -> None:
    """What the writer used to send: server-side apply of a Node with only our taint; and an untaint body
    without ``spec.taints`` once gpulens has applied the list."""
    ours = {"key": OURS, "value": "x", "effect": "NoSchedule"}
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    with FakeKubernetesApi() as fake:
        cluster(fake, ["n1", "n2"])
        with KubernetesClient(KubeConnection(fake.url, {})) as api:
            api.apply(node_path("n1"), {**node, "spec": {"taints": [ours]}}, force=True)
            api.apply(node_path("n2"), {**node, "metadata": {"name": "n2"}, "spec": {"taints": [*THEIRS, ours]}},
                      force=True)
            api.apply(node_path("n2"), {**node, "metadata": {"name": "n2"}}, force=True)
        labels = fake.objects[node_path("n1")]["metadata"]["labels"]
        assert taints(fake, "n1") == [ours], "spec.taints is atomic: applying a one-entry list replaces the list"
        assert taints(fake, "n2") == [], "gpulens came to own the whole list: leaving it out removes every taint"
    assert labels["pool"] == "gpu", "maps are granular: a label gpulens never applied stays"


def test_a_409_is_retried_on_a_fresh_read_of_the_node(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        fake.fail("PATCH", node_path(FAILED[0]), 409, "the object has been modified")
        report = run(fake, db)
        gets = [r for r in fake.requests_to("GET") if r.path == node_path(FAILED[0])]
        patches = [r for r in fake.requests_to("PATCH") if r.path == node_path(FAILED[0])]
    (o,) = [o for o in report.outcomes if o.node == FAILED[0]]
    assert (o.status, o.attempts) == ("applied", 2) and len(gets) == 2 and len(patches) == 2


def test_a_node_changed_since_it_was_read_is_a_conflict_in_the_fake() -> None:
    with FakeKubernetesApi() as fake:
        cluster(fake, ["n1"])
        with KubernetesClient(KubeConnection(fake.url, {})) as api:
            stale = api.get(node_path("n1"))["metadata"]["resourceVersion"]
            fake.put(node_path("n1"), {**fake.objects[node_path("n1")]})  # someone else wrote the Node
            from gpulens.core.kube_api import ConflictError

            with pytest.raises(ConflictError):
                api.merge_patch(node_path("n1"), {"metadata": {"resourceVersion": stale}, "spec": {"taints": []}})
        assert taints(fake, "n1") == THEIRS


def test_a_409_that_never_ends_fails_after_the_bounded_retries(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        fake.fail("PATCH", node_path(FAILED[0]), 409, "the object has been modified", times=None)
        report = run(fake, db)
    (o,) = [o for o in report.outcomes if o.node == FAILED[0]]
    assert o.status == "failed" and "after 5 attempts" in o.message


def test_a_403_says_which_rbac_to_grant_and_the_other_node_still_gets_its_outcome(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        fake.fail("PATCH", node_path(FAILED[0]), 403, 'nodes "x" is forbidden: cannot patch')
        report = run(fake, db)
    outcomes = {o.node: o for o in report.outcomes}
    assert outcomes[FAILED[0]].status == "failed"
    assert "deploy/rbac/gpulens-remediator.yaml" in outcomes[FAILED[0]].message
    assert outcomes[DEGRADING[0]].status == "applied"


def test_an_opted_out_node_is_left_alone_and_a_tainted_node_counts_against_the_cap(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes, {FAILED[0]: {"gpulens.io/remediate": "false"}})
        for other in ("serve-h200-0", "serve-h200-1"):
            fake.objects[node_path(other)]["spec"]["taints"].append({"key": OURS, "value": "x", "effect": "NoSchedule"})
        report = run(fake, db, healthy_seconds=4 * 86400)
        patched = {p.path for p in fake.requests_to("PATCH")}
    outcomes = {o.node: o for o in report.outcomes}
    assert outcomes[FAILED[0]].status == "skipped" and "opted out" in outcomes[FAILED[0]].message
    assert outcomes[DEGRADING[0]].status == "refused" and "cap" in outcomes[DEGRADING[0]].message
    assert outcomes["serve-h200-0"].action == "keep", "ours, not a candidate, but not yet healthy for 4 days"
    assert patched == set()


def test_the_last_schedulable_node_of_a_flavor_is_never_tainted_counting_cordons_notready_and_others_taints(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    flavor = [n for n in nodes if n.startswith("train-h100-") and n != FAILED[0]]
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        for i, n in enumerate(flavor):
            obj = fake.objects[node_path(n)]
            if i % 3 == 0:
                obj["spec"]["unschedulable"] = True
            elif i % 3 == 1:
                obj["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
            else:
                obj["spec"]["taints"].append({"key": "maintenance", "effect": "NoExecute"})
        report = run(fake, db)
        patched = {p.path for p in fake.requests_to("PATCH")}
    outcomes = {o.node: o for o in report.outcomes}
    assert outcomes[FAILED[0]].status == "refused" and "last schedulable" in outcomes[FAILED[0]].message
    assert node_path(FAILED[0]) not in patched
    assert outcomes[DEGRADING[0]].status == "applied"


def test_an_applied_taint_names_the_kueue_tas_workloads_kueue_may_evict(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        for i in range(2):
            fake.add_pod("team-a", f"trainer-{i}", FAILED[0], labels={"kueue.x-k8s.io/tas": "true"},
                         annotations={"kueue.x-k8s.io/workload": "job-trainer-3f2a"})
        fake.add_pod("team-b", "notebook", FAILED[0], labels={"kueue.x-k8s.io/queue-name": "b"})
        report = run(fake, db)
    outcomes = {o.node: o for o in report.outcomes}
    assert "team-a/job-trainer-3f2a (2 pods)" in outcomes[FAILED[0]].message
    assert "TASReplaceNodeOnNodeTaints" in outcomes[FAILED[0]].message
    assert "notebook" not in outcomes[FAILED[0]].message, "not admitted by TAS: Kueue does not re-place it"
    assert "no Kueue TAS workload" in outcomes[DEGRADING[0]].message


def test_no_answer_to_a_taint_is_reported_as_may_have_been_applied(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        fake.hang("PATCH", node_path(FAILED[0]), 3.0)
        with KubernetesClient(KubeConnection(fake.url, {}), timeout_s=0.5) as api:
            report = apply_plan(db, RemediationPolicy(), api, clock=lambda: NOW, sleep=lambda _s: None)
    outcomes = {o.node: o for o in report.outcomes}
    assert outcomes[FAILED[0]].status == "unknown" and "may have been applied" in outcomes[FAILED[0]].message
    assert report.problems == [outcomes[FAILED[0]]]
    assert "1 unknown" in report.render().splitlines()[-1]


def rbac_traffic(db: Path, nodes: list[str]) -> set[Any]:
    """Requests of a taint run, a device-quarantine run and a release run (every verb the remediator uses)."""
    from tests.test_remediation_device import dra_cluster

    needs = set()
    with FakeKubernetesApi() as fake:
        cluster(fake, nodes)
        fake.objects[node_path("train-h100-0")]["spec"]["taints"].append({"key": OURS, "value": "x", "effect": "NoSchedule"})
        run(fake, db, healthy_seconds=86400)
        needs |= {permission(r) for r in fake.requests if not discovery(r.path)}
    with FakeKubernetesApi() as fake:
        dra_cluster(fake, db, nodes)
        run(fake, db, healthy_seconds=86400)
        needs |= {permission(r) for r in fake.requests if not discovery(r.path)}
    return needs


def discovery(path: str) -> bool:
    """``/apis/<group>`` and ``/apis/<group>/<version>``: every authenticated identity may read them."""
    return path.startswith("/apis/") and path.count("/") <= 3


def test_every_request_is_allowed_by_the_rbac_and_every_granted_verb_is_used(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    needs = rbac_traffic(db, nodes)
    rules = role_rules(yaml.safe_load_all(RBAC_FILE.read_text()))
    for need in needs:
        assert allowing(rules, need), f"{need} is not granted by {RBAC_FILE.name}"
    assert granted(rules) == {(n.api_group, n.resource, n.verb) for n in needs}
