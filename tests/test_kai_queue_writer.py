"""KAI Scheduler Queues as quota objects: read from the API into the quota model, written back through the same
guard rails as a ClusterQueue (dry run by default, one outcome per object, read-modify-write with the Queue's
resourceVersion, only ``spec.resources.gpu.quota`` owned, no cut while the queue has pending work, cuts before
raises), and every body fits KAI's published Queue schema."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from analytics.recommend import (
    RecommendationReport,
    RecommendSettings,
    apply_recommendations,
    recommend,
    write_dry_run,
)
from collector.inventory import CORE_LISTS, snapshot_frames
from collector.queue_systems import KAI_QUEUE, pending_queue
from gpulens.core.kube_api import KubeConnection, KubernetesClient
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.crd_schemas import KAI_QUEUE_SPEC
from tests.support.rbac import role_rules, rules_used
from tests.support.recommend_store import StoreBuilder

NOW = datetime(2026, 11, 9, 12, 0)
DAYS = 15 * 288
QUEUES = "/apis/scheduling.run.ai/v2/queues"
ROOT = Path(__file__).resolve().parents[1]


def live_queue(name: str, quota: float, *, limit: float = -1, requested: float | None = None,
               allocated: float = 2, status: bool = True) -> dict[str, Any]:
    """A KAI Queue as a platform team writes it (CPU and memory too, a parent), with its controller's status."""
    queue: dict[str, Any] = {
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue",
        "metadata": {"name": name, "labels": {"team": name}},
        "spec": {"parentQueue": "department-1", "priority": 100, "resources": {
            "gpu": {"quota": quota, "limit": limit, "overQuotaWeight": 1},
            "cpu": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
            "memory": {"quota": -1, "limit": -1, "overQuotaWeight": 1},
        }},
    }
    if status:
        queue["status"] = {"allocated": {"nvidia.com/gpu": str(allocated), "cpu": "4"},
                           "requested": {"nvidia.com/gpu": str(allocated if requested is None else requested)}}
    return queue


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> RecommendationReport:
    """team-a: a confident cut 8 -> 6 (2 of 8 used for 15 days); team-b: a raise 4 -> 5 (work waited)."""
    s = StoreBuilder(tmp_path_factory.mktemp("kai") / "store.duckdb")
    s.quota(KAI_QUEUE, "team-a", "nvidia.com/gpu", tenant="team-a", nominal=8, usage=[2] * DAYS,
            annotations={"parentQueue": "department-1", "limit": "-1"})
    s.quota(KAI_QUEUE, "team-b", "nvidia.com/gpu", tenant="team-b", nominal=4, usage=[4] * DAYS)
    s.pending("team-b", "nvidia.com/gpu", {i: 2 for i in range(DAYS - 288, DAYS)},
              cluster_queue=pending_queue(KAI_QUEUE, "team-b"))
    return recommend(s.save(), RecommendSettings(targets=("kai",)), clock=lambda: NOW)


@pytest.fixture
def fake() -> Iterator[FakeKubernetesApi]:
    with FakeKubernetesApi() as api:
        api.put(f"{QUEUES}/team-a", live_queue("team-a", 8))
        api.put(f"{QUEUES}/team-b", live_queue("team-b", 4, allocated=4, requested=6))
        yield api


def run_apply(report: RecommendationReport, fake: FakeKubernetesApi, record: bool = False) -> RecommendationReport:
    with KubernetesClient(KubeConnection(server=fake.url, headers={"Authorization": "Bearer t"})) as api:
        return apply_recommendations(report, api, clock=lambda: NOW, sleep=lambda s: None, record=record)


def outcomes(report: RecommendationReport) -> dict[str, tuple[str, str]]:
    return {o.ref: (o.status, o.message) for o in report.outcomes}


def gpu(fake: FakeKubernetesApi, name: str) -> dict[str, Any]:
    return dict(fake.objects[f"{QUEUES}/{name}"]["spec"]["resources"]["gpu"])


def test_the_recommendation_cuts_the_idle_queue_and_raises_the_one_whose_work_waited(
        report: RecommendationReport) -> None:
    steps = {q.key.name: (q.action, q.current, q.next_value) for q in report.quotas}
    assert steps == {"team-a": ("decrease", 8, 6), "team-b": ("increase", 4, 5)}
    assert {p.ref for p in report.plans} == {f"{KAI_QUEUE} team-a", f"{KAI_QUEUE} team-b"}


def test_the_dry_run_writes_only_the_gpu_quota_in_bodies_that_fit_kais_published_queue_schema(
        report: RecommendationReport, tmp_path: Path) -> None:
    files = {p.name: p for p in write_dry_run(report, tmp_path)}
    body = yaml.safe_load(files["queue.scheduling.run.ai-team-a.yaml"].read_text())
    assert (body["apiVersion"], body["kind"], body["metadata"]["name"]) == ("scheduling.run.ai/v2", "Queue", "team-a")
    assert body["spec"] == {"resources": {"gpu": {"quota": 6}}}
    jsonschema.validate(body["spec"], KAI_QUEUE_SPEC)
    for obj in yaml.safe_load_all(files["gpuquotarecommendations.yaml"].read_text()):
        assert obj["spec"]["targetRef"]["kind"] == "Queue"


def test_a_dry_run_writes_no_body_for_a_queue_that_opted_out(tmp_path: Path) -> None:
    s = StoreBuilder(tmp_path / "opted-out.duckdb")
    s.quota(KAI_QUEUE, "team-a", "nvidia.com/gpu", tenant="team-a", nominal=8, usage=[2] * DAYS,
            annotations={"gpulens.io/auto-apply": "false", "parentQueue": "department-1"})
    opted_out = recommend(s.save(), RecommendSettings(targets=("kai",)), clock=lambda: NOW)
    (plan,) = opted_out.plans
    assert plan.changes and plan.opted_out
    assert plan.snapshot["metadata"]["annotations"] == {"gpulens.io/auto-apply": "false"}
    assert [p.name for p in write_dry_run(opted_out, tmp_path / "out")] == ["gpuquotarecommendations.yaml"]


def test_a_body_breaking_kais_schema_is_caught() -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"resources": {"gpu": {"quota": "6"}}}, KAI_QUEUE_SPEC)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"resources": {"gpu": {"nominalQuota": 6}}}, KAI_QUEUE_SPEC)


def test_apply_writes_the_quota_with_the_resource_version_read_and_keeps_every_field_it_does_not_own(
        report: RecommendationReport, fake: FakeKubernetesApi) -> None:
    read_version = fake.objects[f"{QUEUES}/team-a"]["metadata"]["resourceVersion"]
    done = outcomes(run_apply(report, fake))
    assert done[f"{KAI_QUEUE} team-a"][0] == "applied"
    assert done[f"{KAI_QUEUE} team-b"][0] == "applied"
    assert gpu(fake, "team-a") == {"quota": 6, "limit": -1, "overQuotaWeight": 1}
    assert gpu(fake, "team-b") == {"quota": 5, "limit": -1, "overQuotaWeight": 1}
    live = fake.objects[f"{QUEUES}/team-a"]
    assert live["spec"]["resources"]["cpu"] == {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    assert (live["spec"]["parentQueue"], live["metadata"]["labels"]) == ("department-1", {"team": "team-a"})
    (patch,) = [r for r in fake.requests if r.method == "PATCH" and r.path == f"{QUEUES}/team-a"]
    assert patch.body["metadata"]["resourceVersion"] == read_version
    assert patch.body["spec"] == {"resources": {"gpu": {"quota": 6}}}
    assert json.loads(live["metadata"]["annotations"]["gpulens.io/applied-to"]) == {"nvidia.com/gpu": 6}


def test_a_cut_waits_while_the_queue_requests_more_gpus_than_it_has_allocated(
        report: RecommendationReport, fake: FakeKubernetesApi) -> None:
    fake.put(f"{QUEUES}/team-a", live_queue("team-a", 8, allocated=2, requested=5))
    status, message = outcomes(run_apply(report, fake))[f"{KAI_QUEUE} team-a"]
    assert status == "refused"
    assert "cut refused, 3 GPU(s) requested beyond the allocation in the live Queue.scheduling.run.ai now" in message
    assert gpu(fake, "team-a")["quota"] == 8


def test_a_cut_is_refused_when_the_queue_does_not_say_what_it_requests(
        report: RecommendationReport, fake: FakeKubernetesApi) -> None:
    fake.put(f"{QUEUES}/team-a", live_queue("team-a", 8, status=False))
    status, message = outcomes(run_apply(report, fake))[f"{KAI_QUEUE} team-a"]
    assert (status, "reports no status.requested (pending work unknown)" in message) == ("refused", True)
    assert gpu(fake, "team-a")["quota"] == 8


def test_a_raise_above_the_queues_limit_is_refused(report: RecommendationReport, fake: FakeKubernetesApi) -> None:
    fake.put(f"{QUEUES}/team-b", live_queue("team-b", 4, limit=4, allocated=4, requested=6))
    status, message = outcomes(run_apply(report, fake))[f"{KAI_QUEUE} team-b"]
    assert status == "refused"
    assert "5 is above the Queue's limit 4: raise spec.resources.gpu.limit first" in message
    assert gpu(fake, "team-b")["quota"] == 4


def test_an_unlimited_queue_is_never_given_a_finite_quota(tmp_path: Path, fake: FakeKubernetesApi) -> None:
    s = StoreBuilder(tmp_path / "unlimited.duckdb")
    s.quota(KAI_QUEUE, "team-b", "nvidia.com/gpu", tenant="team-b", nominal=None,  # type: ignore[arg-type]
            usage=[4] * DAYS, annotations={"quota": "unlimited"})
    unlimited = recommend(s.save(), RecommendSettings(targets=("kai",)), clock=lambda: NOW)
    fake.put(f"{QUEUES}/team-b", live_queue("team-b", -1, allocated=4))
    status, message = outcomes(run_apply(unlimited, fake))[f"{KAI_QUEUE} team-b"]
    assert status == "refused" and "quota is -1 (unlimited)" in message
    assert gpu(fake, "team-b")["quota"] == -1


def test_a_raise_waits_for_the_cut_of_its_pool_and_is_refused_when_the_cut_does_not_land(
        report: RecommendationReport, fake: FakeKubernetesApi) -> None:
    fake.fail("PATCH", f"{QUEUES}/team-a", 500, times=None)
    done = run_apply(report, fake)
    patches = [r.path for r in fake.requests if r.method == "PATCH"]
    assert patches and all(p == f"{QUEUES}/team-a" for p in patches)  # the raise was never sent
    status, message = outcomes(done)[f"{KAI_QUEUE} team-b"]
    assert status == "refused" and f"the cut of {KAI_QUEUE} team-a (failed)" in message
    assert gpu(fake, "team-b")["quota"] == 4


def test_every_request_of_a_kai_apply_is_allowed_by_the_rbac_and_its_write_verbs_are_needed(
        report: RecommendationReport, fake: FakeKubernetesApi) -> None:
    existing = set(fake.objects)
    run_apply(report, fake, record=True)
    rbac = role_rules(doc for name in ("gpulens-recommender.yaml", "gpulens-recommender-kai.yaml")
                      for doc in yaml.safe_load_all((ROOT / "deploy/rbac" / name).read_text()))
    kai_rules = {i for i, rule in enumerate(rbac) if "scheduling.run.ai" in rule["apiGroups"]}
    used = rules_used(fake.requests, rbac, existing)
    assert {(i, verb) for i in kai_rules for verb in rbac[i]["verbs"] if verb not in ("get", "list")} <= used


def empty_cluster(api: FakeKubernetesApi) -> None:
    for path in CORE_LISTS.values():
        api.objects[path] = {"kind": "List", "items": []}


def test_the_inventory_reads_kai_queues_into_quota_rows_and_pending_demand() -> None:
    with FakeKubernetesApi() as api:
        empty_cluster(api)
        api.objects[QUEUES] = {"kind": "QueueList", "items": [
            {**live_queue("team-a", 8, limit=12, allocated=2.5, requested=5),
             "metadata": {"name": "team-a", "annotations": {"gpulens.io/auto-apply": "false"}}},
            live_queue("department-1", -1, allocated=0),
            {"metadata": {"name": "no-status"}, "spec": {"resources": {"gpu": {"quota": 2}}}},
        ]}
        with KubernetesClient(api.url) as client:
            frames = snapshot_frames(client, 1_793_000_000.0)
    rows = {r["object_name"]: r for r in frames["quota_snapshots"].filter(
        frames["quota_snapshots"]["object_kind"] == KAI_QUEUE).to_dicts()}
    team = rows["team-a"]
    assert (team["resource"], team["flavor"], team["nominal_quota"], team["borrowing_limit"], team["usage"]) == (
        "nvidia.com/gpu", "", 8.0, 4.0, 2.5)
    notes = json.loads(team["annotations"])
    assert (notes["parentQueue"], notes["gpulens.io/auto-apply"]) == ("department-1", "false")
    assert (rows["department-1"]["nominal_quota"], json.loads(rows["department-1"]["annotations"])["quota"]) == (
        None, "unlimited")
    assert (rows["no-status"]["nominal_quota"], rows["no-status"]["borrowing_limit"], rows["no-status"]["usage"]) == (
        2.0, 0.0, None)  # no limit set: nothing above the quota; no status: usage not measured
    pending = frames["pending_demand"].to_dicts()
    assert [(p["cluster_queue"], p["quantity"]) for p in pending] == [(pending_queue(KAI_QUEUE, "team-a"), 2.5)]


def test_a_cluster_without_kai_scheduler_has_no_kai_rows_and_no_error() -> None:
    with FakeKubernetesApi() as api, KubernetesClient(api.url) as client:
        empty_cluster(api)
        frames = snapshot_frames(client, 1_793_000_000.0)
    assert "pending_demand" not in frames
    assert KAI_QUEUE not in set(frames.get("quota_snapshots", {"object_kind": []})["object_kind"])
