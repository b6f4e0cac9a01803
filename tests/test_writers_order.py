"""`recommend --apply` writes in the same order as `plan --apply`: every cut first, then the raises of each flavor only
once all its cuts landed; after a partial apply each flavor's live total is read back against its capacity."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest

from analytics.recommend import (
    RecommendationReport,
    RecommendSettings,
    apply_recommendations,
    recommend,
)
from gpulens.core.kube_api import KubeConnection, KubernetesClient
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.order_fleet import H100, H200, NOW, build_order_fleet, live_queue, put_live_queues, written
from tests.support.recommend_cluster import CQ_V1BETA2

CLOCK = datetime(2026, 11, 16, 12, 0)
NODES = {H100: 6, H200: 4}
"""8-GPU nodes per flavor: 48 H100s and 32 H200s."""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> RecommendationReport:
    store = build_order_fleet(tmp_path_factory.mktemp("order") / "store.duckdb", nodes=NODES)
    return recommend(store, RecommendSettings(targets=("kueue",), store_results=False), clock=lambda: CLOCK)


@pytest.fixture
def fake() -> Iterator[FakeKubernetesApi]:
    with FakeKubernetesApi() as api:
        put_live_queues(api)
        yield api


def run_apply(report: RecommendationReport, fake: FakeKubernetesApi) -> RecommendationReport:
    with KubernetesClient(KubeConnection(server=fake.url, headers={}), timeout_s=5) as api:
        return apply_recommendations(report, api, clock=lambda: CLOCK, sleep=lambda s: None, record=False)


def outcome(done: RecommendationReport, queue: str) -> str:
    return next(f"{o.status}: {o.message}" for o in done.outcomes if o.ref == f"ClusterQueue {queue}")


def test_recommend_applies_every_cut_before_any_raise(report: RecommendationReport, fake: FakeKubernetesApi) -> None:
    done = run_apply(report, fake)
    assert written(fake) == [
        ("inference", {H100: 16, H200: 6}), ("research", {H100: 18}),
        ("inference", {H100: 20, H200: 6}), ("training", {H200: 20}),
    ]
    assert [o.status for o in done.outcomes] == ["unchanged", "applied", "applied", "applied"]
    assert done.live_totals == ()  # everything landed: nothing read back


def test_recommend_refuses_the_raises_of_a_flavor_whose_cut_failed_and_reads_the_totals_back(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    fake.fail("PATCH", f"{CQ_V1BETA2}/research", 500, "etcdserver: leader changed")
    done = run_apply(report, fake)
    assert ("inference", {H100: 20, H200: 6}) not in written(fake)
    assert outcome(done, "research").startswith("failed: PATCH ")
    assert outcome(done, "inference") == (
        "applied: h200-141gb/nvidia.com/gpu 8 -> 6; h100-80gb/nvidia.com/gpu: raise refused: the cut of "
        "ClusterQueue research (failed) in this flavor did not land, and a raise could put the flavor over capacity")
    assert outcome(done, "training") == "applied: h200-141gb/nvidia.com/gpu 16 -> 20"
    lines = [t.line() for t in done.live_totals]
    assert lines == ["h100-80gb/nvidia.com/gpu: live total 46 over 3 object(s), of capacity 48",
                     "h200-141gb/nvidia.com/gpu: live total 26 over 2 object(s), of capacity 32"]
    text = done.render()
    assert "Live totals after a partial apply (read back from the API server)" in text
    assert "Outcome per object (2 applied, 1 unchanged, 0 skipped, 0 refused, 1 failed, 0 unknown)" in text


def test_a_live_total_that_cannot_be_read_whole_says_at_least_and_names_the_object(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    fake.fail("PATCH", f"{CQ_V1BETA2}/research", 500, "etcdserver: leader changed")
    fake.fail("GET", f"{CQ_V1BETA2}/batch", 503, "apiserver is shutting down")
    done = run_apply(report, fake)
    h100 = next(t for t in done.live_totals if t.flavor == H100)
    assert h100.line() == ("h100-80gb/nvidia.com/gpu: live total at least 40 over 3 object(s), of capacity 48 so "
                           "far; not readable: ClusterQueue batch (apiserver is shutting down)")


def test_an_object_opted_out_is_skipped_once_and_its_skipped_cut_holds_its_flavors_raises(
    report: RecommendationReport, fake: FakeKubernetesApi
) -> None:
    inference = live_queue("inference", NOW["inference"])
    inference["metadata"]["annotations"] = {"gpulens.io/auto-apply": "false"}
    fake.put(f"{CQ_V1BETA2}/inference", inference)
    done = run_apply(report, fake)
    assert outcome(done, "inference") == 'skipped: opted out: annotated gpulens.io/auto-apply: "false"'
    writes_before_totals = [r for r in fake.requests if r.path == f"{CQ_V1BETA2}/inference"][:-1]
    assert [r.method for r in writes_before_totals] == ["GET"]  # read once for its cut, never again to raise
    assert written(fake) == [("research", {H100: 18})]
    assert outcome(done, "training") == (
        "refused: h200-141gb/nvidia.com/gpu: raise refused: the cut of ClusterQueue inference (skipped) in this "
        "flavor did not land, and a raise could put the flavor over capacity")
