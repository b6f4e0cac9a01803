"""Quota writers against FakeKubernetesApi: server-side apply requests, guard rails, 409, 403, RBAC."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import jsonschema
import pytest
import yaml

from analytics.recommend import (
    RecommendationReport,
    RecommendSettings,
    apply_recommendations,
    recommend,
)
from gpulens.core.kube_api import KubeConnection, KubernetesClient, connection_from_kubeconfig
from tests.fakes.kubernetes_api import FakeKubernetesApi, RecordedRequest
from tests.support.rbac import role_rules, rules_used
from tests.support.recommend_cluster import (
    CQ_V1BETA2,
    RQ_PATH,
    build_writer_store,
    live_cluster_queue,
    live_resource_quota,
)

NOW = datetime(2026, 11, 9, 12, 0)
KUEUE_GROUPS = json.loads(
    (Path(__file__).parent / "fixtures/kueue_clusterqueue_resourcegroups.schema.json").read_text()
)
CR_PREFIX = "/apis/gpulens.io/v1alpha1/namespaces/gpulens/gpuquotarecommendations"


@pytest.fixture
def fake() -> Iterator[FakeKubernetesApi]:
    with FakeKubernetesApi() as api:
        for name in ("team-a", "team-c"):
            api.put(f"{CQ_V1BETA2}/{name}", live_cluster_queue(name))
        api.put(f"{CQ_V1BETA2}/team-b", live_cluster_queue("team-b", annotations={"gpulens.io/auto-apply": "false"}))
        api.put(RQ_PATH, live_resource_quota())
        yield api


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> RecommendationReport:
    store = build_writer_store(tmp_path_factory.mktemp("writers") / "store.duckdb")
    return recommend(store, RecommendSettings(), clock=lambda: NOW)


def run_apply(report: RecommendationReport, fake: FakeKubernetesApi, record: bool = True) -> RecommendationReport:
    with KubernetesClient(KubeConnection(server=fake.url, headers={"Authorization": "Bearer t"})) as api:
        return apply_recommendations(report, api, clock=lambda: NOW, sleep=lambda s: None, record=record)


def outcome(report: RecommendationReport, ref: str) -> str:
    return next(f"{o.status}: {o.message}" for o in report.outcomes if o.ref == ref)


def patches(fake: FakeKubernetesApi, path: str) -> list[RecordedRequest]:
    return [r for r in fake.requests_to("PATCH") if r.path == path]


def test_apply_is_a_server_side_apply_of_only_the_fields_gpulens_owns(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    run_apply(report, fake, record=False)
    (req,) = patches(fake, f"{CQ_V1BETA2}/team-a")
    assert req.headers["content-type"] == "application/apply-patch+yaml"
    assert req.query == {"fieldManager": "gpulens", "force": "true"}
    body = req.body
    assert set(body) == {"apiVersion", "kind", "metadata", "spec"}
    assert (body["apiVersion"], body["kind"]) == ("kueue.x-k8s.io/v1beta2", "ClusterQueue")
    assert set(body["spec"]) == {"resourceGroups"}  # cohortName, namespaceSelector: not ours
    jsonschema.validate(body["spec"]["resourceGroups"], KUEUE_GROUPS)
    assert body["metadata"]["resourceVersion"]  # optimistic concurrency
    gpu, spot = (
        {r["name"]: r for r in f["resources"]} for f in body["spec"]["resourceGroups"][0]["flavors"]
    )
    assert gpu["nvidia.com/gpu"] == {"name": "nvidia.com/gpu", "nominalQuota": 12, "borrowingLimit": 4,
                                     "lendingLimit": 2}
    assert gpu["cpu"]["nominalQuota"] == 100 and gpu["memory"]["nominalQuota"] == "400Gi"
    assert spot["nvidia.com/gpu"] == {"name": "nvidia.com/gpu", "nominalQuota": 2}
    stored = fake.objects[f"{CQ_V1BETA2}/team-a"]
    assert stored["spec"]["cohortName"] == "ai-factory"
    assert stored["metadata"]["annotations"]["owner"] == "platform"


def test_applied_objects_carry_audit_annotations(report: RecommendationReport, fake: FakeKubernetesApi) -> None:
    run_apply(report, fake, record=False)
    notes = patches(fake, f"{CQ_V1BETA2}/team-a")[0].body["metadata"]["annotations"]
    assert json.loads(notes["gpulens.io/applied-from"]) == {"h100/nvidia.com/gpu": 16}
    assert json.loads(notes["gpulens.io/applied-to"]) == {"h100/nvidia.com/gpu": 12}
    assert notes["gpulens.io/applied-at"] == "2026-11-09T12:00:00Z"
    assert notes["gpulens.io/recommendation"].startswith("gpulens/clusterqueue-team-a (run ")


def test_v1beta1_cluster_queues_are_written_at_their_own_path(tmp_path: Path) -> None:
    report = recommend(build_writer_store(tmp_path / "s.duckdb"),
                       RecommendSettings(kueue_version="v1beta1", targets=("kueue",)), clock=lambda: NOW)
    path = "/apis/kueue.x-k8s.io/v1beta1/clusterqueues/team-a"
    with FakeKubernetesApi() as fake:
        obj = live_cluster_queue("team-a")
        obj["apiVersion"] = "kueue.x-k8s.io/v1beta1"
        fake.put(path, obj)
        done = run_apply(report, fake, record=False)
    assert outcome(done, "ClusterQueue team-a").startswith("applied")
    assert patches(fake, path)[0].body["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    assert not fake.requests_to("GET", "/api/v1/")  # --target kueue: no ResourceQuota traffic


def test_a_409_conflict_is_retried_after_reading_the_object_again(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    path = f"{CQ_V1BETA2}/team-a"
    fake.fail("PATCH", path, 409, "Operation cannot be fulfilled: the object has been modified")
    done = run_apply(report, fake, record=False)
    assert outcome(done, "ClusterQueue team-a").startswith("applied")
    assert len(patches(fake, path)) == 2
    last_patch = max(i for i, r in enumerate(fake.requests) if r.method == "PATCH" and r.path == path)
    assert len([r for r in fake.requests[:last_patch] if r.method == "GET" and r.path == path]) == 2
    assert fake.objects[path]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] == 12


def test_a_403_is_reported_clearly_with_the_rbac_to_grant(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    path = f"{CQ_V1BETA2}/team-a"
    fake.fail("PATCH", path, 403, 'clusterqueues.kueue.x-k8s.io "team-a" is forbidden: User "x" cannot patch')
    done = run_apply(report, fake, record=False)
    message = outcome(done, "ClusterQueue team-a")
    assert message.startswith("failed: forbidden: the API server refused to patch ClusterQueue team-a")
    assert "cannot patch" in message and "deploy/rbac/" in message
    assert outcome(done, "ResourceQuota ns-c/gpu-quota").startswith("applied")  # the others go on


def test_an_object_annotated_auto_apply_false_is_never_patched(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    done = run_apply(report, fake, record=False)
    assert outcome(done, "ClusterQueue team-b").startswith("skipped: opted out")
    assert patches(fake, f"{CQ_V1BETA2}/team-b") == []


def test_low_confidence_changes_are_refused_and_nothing_is_sent(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    plan = next(p for p in report.plans if p.name == "team-c")
    assert plan.changes and not plan.applicable
    done = run_apply(report, fake, record=False)
    assert outcome(done, "ClusterQueue team-c").startswith("refused: ")
    assert "low confidence" in outcome(done, "ClusterQueue team-c")
    assert patches(fake, f"{CQ_V1BETA2}/team-c") == []  # only read, for the live totals after the apply


def test_a_value_changed_since_the_evidence_is_not_overwritten(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    fake.put(f"{CQ_V1BETA2}/team-a", live_cluster_queue("team-a", gpus=30))
    done = run_apply(report, fake, record=False)
    assert "differs from the evidence" in outcome(done, "ClusterQueue team-a")
    assert patches(fake, f"{CQ_V1BETA2}/team-a") == []


def test_resourcequota_apply_writes_only_the_gpu_request_keys(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    done = run_apply(report, fake, record=False)
    assert outcome(done, "ResourceQuota ns-c/gpu-quota") == "applied: nvidia.com/gpu 8 -> 6"
    (req,) = patches(fake, RQ_PATH)
    assert req.body["spec"] == {"hard": {"requests.nvidia.com/gpu": "6"}}
    assert req.body["metadata"]["namespace"] == "ns-c"
    assert fake.objects[RQ_PATH]["spec"]["hard"] == {"requests.nvidia.com/gpu": "6", "requests.cpu": "64",
                                                     "pods": "100"}


def test_recommendation_objects_are_recorded_spec_then_status(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    run_apply(report, fake)
    name = f"{CR_PREFIX}/clusterqueue-team-a"
    spec_req, status_req = [r for r in fake.requests_to("PATCH", CR_PREFIX) if r.path.startswith(name)]
    assert (spec_req.path, status_req.path) == (name, f"{name}/status")
    assert "status" not in spec_req.body and status_req.body["status"]["resources"][0]["nextStep"] == 12
    stored = fake.objects[name]
    conditions = {c["type"]: c for c in stored["status"]["conditions"]}
    assert conditions["Applied"]["status"] == "True"
    assert conditions["LowConfidence"]["status"] == "False"
    assert stored["spec"]["policy"]["autoApply"] is True
    team_c = {c["type"]: c for c in fake.objects[f"{CR_PREFIX}/clusterqueue-team-c"]["status"]["conditions"]}
    assert (team_c["Applied"]["status"], team_c["LowConfidence"]["status"]) == ("False", "True")


def test_every_request_is_allowed_by_the_rbac_and_every_write_verb_is_needed(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    existing = set(fake.objects)
    run_apply(report, fake)
    rbac_file = Path(__file__).parents[1] / "deploy/rbac/gpulens-recommender.yaml"
    rules = role_rules(yaml.safe_load_all(rbac_file.read_text()))
    used = rules_used(fake.requests, rules, existing)
    for i, rule in enumerate(rules):
        for verb in rule["verbs"]:
            assert (i, verb) in used or verb in ("get", "list"), f"rule {rule} grants unused {verb}"
    assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in rules)
    assert all(v in ("get", "list", "create", "patch") for r in rules for v in r["verbs"])


def test_a_kubeconfig_token_is_sent_as_a_bearer_header(tmp_path: Path) -> None:
    with FakeKubernetesApi() as fake:
        fake.put(RQ_PATH, live_resource_quota())
        with KubernetesClient(connection_from_kubeconfig(fake.kubeconfig(tmp_path, token="s3cret"))) as api:
            assert api.get(RQ_PATH)["kind"] == "ResourceQuota"
    assert fake.requests[0].headers["authorization"] == "Bearer s3cret"


def test_borrowing_and_lending_limits_change_only_when_configured(tmp_path: Path) -> None:
    report = recommend(build_writer_store(tmp_path / "s.duckdb"),
                       RecommendSettings(targets=("kueue",), lending_limit_ratio=0.5), clock=lambda: NOW)
    with FakeKubernetesApi() as fake:
        fake.put(f"{CQ_V1BETA2}/team-a", live_cluster_queue("team-a"))
        run_apply(report, fake, record=False)
    (req,) = patches(fake, f"{CQ_V1BETA2}/team-a")
    gpu = req.body["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": 12, "borrowingLimit": 4, "lendingLimit": 6}


def test_names_from_the_store_cannot_escape_their_url_path_segment() -> None:
    from analytics.writers.kueue import ClusterQueueTarget
    from analytics.writers.resourcequota import ResourceQuotaTarget

    assert ClusterQueueTarget().path("", "../../api/v1/secrets?x=1") == (
        "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/..%2F..%2Fapi%2Fv1%2Fsecrets%3Fx%3D1")
    assert ResourceQuotaTarget().path("ns/evil", "q") == "/api/v1/namespaces/ns%2Fevil/resourcequotas/q"


def test_a_missing_live_object_is_reported_and_the_others_still_apply(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    del fake.objects[f"{CQ_V1BETA2}/team-a"]
    done = run_apply(report, fake, record=False)
    assert outcome(done, "ClusterQueue team-a").startswith("failed: ClusterQueue team-a not found")
    assert outcome(done, "ResourceQuota ns-c/gpu-quota").startswith("applied")


BROKEN_ANSWERS = {
    "a 500": lambda fake, method, path: fake.fail(method, path, 500, "etcdserver: request timed out"),
    "an HTML page": lambda fake, method, path: fake.answer_raw(method, path, b"<html>\n<h1>Bad gateway</h1>\n</html>"),
    "a hang": lambda fake, method, path: fake.hang(method, path, 3.0),
}
BROKEN_REASONS = {"a 500": "HTTP 500: etcdserver: request timed out", "an HTML page": "not a JSON object (text/html)",
                  "a hang": "no answer within 0.5 s"}


@pytest.mark.parametrize("method", ["GET", "PATCH"])
@pytest.mark.parametrize("broken", list(BROKEN_ANSWERS))
def test_a_broken_answer_for_one_object_fails_that_object_only_and_is_recorded(
    report: RecommendationReport, fake: FakeKubernetesApi, method: str, broken: str
) -> None:
    path = f"{CQ_V1BETA2}/team-a"  # the first object: everything after it must still be tried
    BROKEN_ANSWERS[broken](fake, method, path)
    with KubernetesClient(KubeConnection(server=fake.url, headers={}), timeout_s=0.5) as api:
        done = apply_recommendations(report, api, clock=lambda: NOW, sleep=lambda s: None)
    assert [o.ref for o in done.outcomes] == [p.ref for p in report.plans]
    message = outcome(done, "ClusterQueue team-a")
    lost = method == "PATCH" and broken != "a 500"  # the write may have landed: say so, never "failed"
    assert message.startswith(f"{'unknown' if lost else 'failed'}: {method} {path}: ")
    assert BROKEN_REASONS[broken] in message
    assert "\n" not in message
    if lost:
        assert "may" in message and "applied" in message and "read back: h100/nvidia.com/gpu 16" in message
    assert outcome(done, "ResourceQuota ns-c/gpu-quota") == "applied: nvidia.com/gpu 8 -> 6"
    assert outcome(done, "ClusterQueue team-b").startswith("skipped")
    assert all(o.recorded for o in done.outcomes)
    applied = {c["type"]: c for c in fake.objects[f"{CR_PREFIX}/clusterqueue-team-a"]["status"]["conditions"]}["Applied"]
    assert (applied["status"], applied["reason"]) == (("Unknown", "MayHaveBeenApplied") if lost else ("False", "Failed"))
    assert BROKEN_REASONS[broken] in applied["message"]


def test_an_unreachable_api_server_fails_every_object_with_the_reason(report: RecommendationReport) -> None:
    with KubernetesClient(KubeConnection(server="http://127.0.0.1:9", headers={}), timeout_s=2) as api:
        done = apply_recommendations(report, api, clock=lambda: NOW, sleep=lambda s: None)
    changed = [o for o in done.outcomes if o.status != "unchanged" and o.status != "refused"]
    assert changed and all(o.status == "failed" for o in changed)
    assert all("cannot reach the API server http://127.0.0.1:9" in o.message for o in changed)
    assert all(o.recorded is False and "cannot reach" in (o.record_error or "") for o in done.outcomes)


def test_a_cut_is_refused_while_the_live_cluster_queue_has_pending_workloads(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    live = live_cluster_queue("team-a")
    live["status"]["pendingWorkloads"] = 3  # the store saw none; the queue has some now
    fake.put(f"{CQ_V1BETA2}/team-a", live)
    done = run_apply(report, fake, record=False)
    assert outcome(done, "ClusterQueue team-a") == (
        "refused: h100/nvidia.com/gpu: cut refused, 3 workload(s) pending in the live ClusterQueue now")
    assert patches(fake, f"{CQ_V1BETA2}/team-a") == []
    assert outcome(done, "ResourceQuota ns-c/gpu-quota").startswith("applied")  # no queue: not held


def test_a_cut_is_refused_when_the_live_cluster_queue_does_not_report_pending_workloads(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    live = live_cluster_queue("team-a")
    del live["status"]  # never reconciled by Kueue: pending work unknown, not zero
    fake.put(f"{CQ_V1BETA2}/team-a", live)
    done = run_apply(report, fake, record=False)
    assert "pending work unknown" in outcome(done, "ClusterQueue team-a")
    assert outcome(done, "ClusterQueue team-a").startswith("refused")
    assert patches(fake, f"{CQ_V1BETA2}/team-a") == []


def test_the_outcome_table_has_one_row_per_object_with_its_outcome_and_reason(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    fake.fail("GET", RQ_PATH, 500, "internal error")
    text = run_apply(report, fake).render()
    table = text[text.index("Outcome per object"):text.index("Live totals")].strip().splitlines()
    assert table[0] == "Outcome per object (1 applied, 0 unchanged, 1 skipped, 1 refused, 1 failed, 0 unknown)"
    rows = {line.split("  ")[1].strip(): line.split() for line in table[2:]}
    assert rows["ClusterQueue team-a"][2:4] == ["applied", "yes"]
    assert rows["ResourceQuota ns-c/gpu-quota"][2:4] == ["failed", "yes"]
    assert "HTTP 500: internal error" in table[-1]
