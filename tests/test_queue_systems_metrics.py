"""KAI Scheduler, Volcano and Kueue cohort queue metrics (exposition text as those components write it) land in
the same quota model as Kueue's ClusterQueues, each queue naming its system; a KAI or Volcano queue never
shares the pending work of a ClusterQueue that happens to have the same name."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl

from analytics.facts import Window, bind_facts
from analytics.queue_use import queue_use
from analytics.quota import QuotaSettings, load_quota_evidence
from analytics.recommend import RecommendSettings, recommend
from collector.exposition import parse_exposition
from collector.mapping import to_store_frames
from collector.queue_systems import KAI_QUEUE, VOLCANO_QUEUE, pending_queue, system_of
from collector.validate import validate_samples
from tests.support.recommend_store import StoreBuilder

T_MS = 1_793_000_000_000

# KAI's queue controller and scheduler, default metrics namespace "kai" (pkg/queuecontroller/metrics,
# pkg/scheduler/metrics); the queue-controller pod's own labels come along when Prometheus scrapes it.
KAI_TEXT = """\
# HELP kai_queue_deserved_gpus Queue deserved GPUs
# TYPE kai_queue_deserved_gpus gauge
kai_queue_deserved_gpus{queue_name="team-a"} 4
kai_queue_deserved_gpus{queue_name="department-1"} -1
# HELP kai_queue_allocated_gpus Queue allocated GPUs
# TYPE kai_queue_allocated_gpus gauge
kai_queue_allocated_gpus{queue_name="team-a"} 2.5
kai_queue_allocated_gpus{queue_name="department-1"} 6
# HELP kai_queue_fair_share_gpu GPU Fair share of queue, as a gauge. Values in GPU devices
# TYPE kai_queue_fair_share_gpu gauge
kai_queue_fair_share_gpu{queue_name="team-a"} 5
# HELP kai_queue_quota_cpu_cores Queue quota CPU
# TYPE kai_queue_quota_cpu_cores gauge
kai_queue_quota_cpu_cores{queue_name="team-a"} 8
"""

# Volcano's scheduler (pkg/scheduler/metrics/queue.go): scalar resources in milli-units.
VOLCANO_TEXT = """\
# HELP volcano_queue_deserved_scalar_resources Deserved scalar resources for one queue
# TYPE volcano_queue_deserved_scalar_resources gauge
volcano_queue_deserved_scalar_resources{queue_name="org1",resource="nvidia.com/gpu"} 20000
volcano_queue_deserved_scalar_resources{queue_name="org1",resource="hugepages-2Mi"} 5000
# HELP volcano_queue_capacity_scalar_resources Capacity scalar resources for one queue
# TYPE volcano_queue_capacity_scalar_resources gauge
volcano_queue_capacity_scalar_resources{queue_name="org1",resource="nvidia.com/gpu"} 60000
# HELP volcano_queue_allocated_scalar_resources Allocated scalar resources for one queue
# TYPE volcano_queue_allocated_scalar_resources gauge
volcano_queue_allocated_scalar_resources{queue_name="org1",resource="nvidia.com/gpu"} 12000
# HELP volcano_queue_request_scalar_resources Request scalar resources for one queue
# TYPE volcano_queue_request_scalar_resources gauge
volcano_queue_request_scalar_resources{queue_name="org1",resource="nvidia.com/gpu"} 15500
# HELP volcano_queue_allocated_milli_cpu Allocated CPU count for one queue
# TYPE volcano_queue_allocated_milli_cpu gauge
volcano_queue_allocated_milli_cpu{queue_name="org1"} 4000
"""

COHORT_TEXT = """\
# HELP kueue_cohort_subtree_quota Reports the cohort's subtree quota
# TYPE kueue_cohort_subtree_quota gauge
kueue_cohort_subtree_quota{cohort="ai-factory",flavor="h200",resource="nvidia.com/gpu"} 64
# HELP kueue_cohort_subtree_resource_reservations Reports the cohort's subtree reservations
# TYPE kueue_cohort_subtree_resource_reservations gauge
kueue_cohort_subtree_resource_reservations{cohort="ai-factory",flavor="h200",resource="nvidia.com/gpu"} 40
# HELP kueue_cohort_weighted_share Reports the cohort's weighted share
# TYPE kueue_cohort_weighted_share gauge
kueue_cohort_weighted_share{cohort="ai-factory"} 312
"""


def frames_of(text: str) -> dict[str, pl.DataFrame]:
    long, _ = validate_samples(parse_exposition(text).with_columns(ts_ms=pl.lit(T_MS, dtype=pl.Int64)))
    return to_store_frames(long, "auto", "prometheus")


def quota_rows(frames: dict[str, pl.DataFrame]) -> dict[tuple[str, str, str], dict[str, object]]:
    rows = frames["quota_snapshots"].sort("object_kind", "object_name", "resource").to_dicts()
    return {(r["object_kind"], r["object_name"], r["resource"]): r for r in rows}


def test_kai_queue_gauges_become_one_gpu_quota_entry_per_queue_with_its_fair_share() -> None:
    rows = quota_rows(frames_of(KAI_TEXT))
    assert set(rows) == {(KAI_QUEUE, "team-a", "nvidia.com/gpu"), (KAI_QUEUE, "department-1", "nvidia.com/gpu")}
    team = rows[(KAI_QUEUE, "team-a", "nvidia.com/gpu")]
    assert (team["nominal_quota"], team["usage"], team["flavor"], team["tenant"]) == (4.0, 2.5, "", "team-a")
    assert json.loads(str(team["annotations"])) == {"fairShareGpus": 5.0}
    assert system_of(str(team["object_kind"])) == "kai"


def test_an_unlimited_kai_quota_is_kept_as_unlimited_never_as_minus_one_or_zero() -> None:
    rows = quota_rows(frames_of(KAI_TEXT))
    department = rows[(KAI_QUEUE, "department-1", "nvidia.com/gpu")]
    assert department["nominal_quota"] is None
    assert json.loads(str(department["annotations"])) == {"quota": "unlimited"}
    assert department["usage"] == 6.0


def test_kai_gauges_without_the_metrics_namespace_prefix_are_read_the_same() -> None:
    plain = quota_rows(frames_of(KAI_TEXT.replace("kai_queue_", "queue_")))
    prefixed = quota_rows(frames_of(KAI_TEXT))
    assert {k: (v["nominal_quota"], v["usage"]) for k, v in plain.items()} == {
        k: (v["nominal_quota"], v["usage"]) for k, v in prefixed.items()}


def test_volcano_scalar_resources_are_read_as_milli_units_and_request_beyond_allocation_is_pending() -> None:
    frames = frames_of(VOLCANO_TEXT)
    rows = quota_rows(frames)
    assert set(rows) == {(VOLCANO_QUEUE, "org1", "nvidia.com/gpu")}  # devices only: no hugepages, no cpu
    org = rows[(VOLCANO_QUEUE, "org1", "nvidia.com/gpu")]
    assert (org["nominal_quota"], org["borrowing_limit"], org["usage"]) == (20.0, 40.0, 12.0)
    assert json.loads(str(org["annotations"])) == {"capacity": 60.0}
    pending = frames["pending_demand"].to_dicts()
    assert [(p["cluster_queue"], p["resource"], p["profile"], p["quantity"]) for p in pending] == [
        (pending_queue(VOLCANO_QUEUE, "org1"), "nvidia.com/gpu", "gpu", 3.5)]


def test_kueue_cohort_gauges_become_cohort_rows_beside_the_cluster_queues() -> None:
    rows = quota_rows(frames_of(COHORT_TEXT))
    cohort = rows[("Cohort", "ai-factory", "nvidia.com/gpu")]
    assert (cohort["flavor"], cohort["nominal_quota"], cohort["usage"]) == ("h200", 64.0, 40.0)
    assert json.loads(str(cohort["annotations"])) == {"weightedShare": 312.0}


def test_a_kai_queue_never_takes_the_pending_work_of_a_cluster_queue_with_the_same_name(tmp_path: Path) -> None:
    n = 15 * 288
    store = StoreBuilder(tmp_path / "s.duckdb")
    store.quota("ClusterQueue", "team-a", "nvidia.com/gpu", flavor="h200", tenant="team-a", nominal=8,
                usage=[4] * n)
    store.quota(KAI_QUEUE, "team-a", "nvidia.com/gpu", tenant="team-a", nominal=8, usage=[4] * n)
    store.pending("team-a", "nvidia.com/gpu", {n - 5: 6}, cluster_queue="team-a")  # Kueue's gauge
    store.pending("team-a", "nvidia.com/gpu", {n - 3: 2}, cluster_queue=pending_queue(KAI_QUEUE, "team-a"))
    path = store.save()
    with duckdb.connect(str(path)) as con:
        bind_facts(con, None)
        end = store.ts(n)
        evidence = {e.key.object_kind: e for e in load_quota_evidence(con, end - timedelta(days=16), end,
                                                                      QuotaSettings())}
    assert (evidence["ClusterQueue"].pending_buckets, evidence["ClusterQueue"].pending_max) == (1, 6)
    assert (evidence[KAI_QUEUE].pending_buckets, evidence[KAI_QUEUE].pending_max) == (1, 2)
    assert evidence[KAI_QUEUE].key.system == "kai"


def test_quota_use_lists_kai_and_volcano_queues_with_the_buckets_their_own_work_waited(tmp_path: Path) -> None:
    store = StoreBuilder(tmp_path / "use.duckdb")
    store.quota(KAI_QUEUE, "team-a", "nvidia.com/gpu", tenant="team-a", nominal=8, usage=[2, 2, 4, 4])
    store.quota(VOLCANO_QUEUE, "org1", "nvidia.com/gpu", tenant="org1", nominal=20, usage=[12] * 4)
    store.quota("ClusterQueue", "org1", "nvidia.com/gpu", flavor="h200", tenant="org1", nominal=4, usage=[4] * 4)
    store.pending("org1", "nvidia.com/gpu", {1: 3, 2: 3}, cluster_queue=pending_queue(VOLCANO_QUEUE, "org1"))
    store.quota("Cohort", "ai-factory", "nvidia.com/gpu", flavor="h200", nominal=64, usage=[40] * 4)
    path = store.save()
    with duckdb.connect(str(path)) as con:
        bind_facts(con, None)
        rows = {(u.object_kind, u.name): u for u in queue_use(con, Window(store.ts(0), store.ts(4), 300))}
    assert set(rows) == {(KAI_QUEUE, "team-a"), (VOLCANO_QUEUE, "org1"), ("ClusterQueue", "org1")}  # no Cohort
    kai = rows[(KAI_QUEUE, "team-a")]
    assert (kai.nominal, kai.usage_mean, kai.usage_peak, kai.pending_buckets) == (8.0, 3.0, 4.0, 0)
    volcano = rows[(VOLCANO_QUEUE, "org1")]
    assert (volcano.pending_buckets, volcano.pending_peak) == (2, 3.0)
    assert rows[("ClusterQueue", "org1")].pending_buckets == 0  # the Volcano queue's work is its own


def test_volcano_queues_are_recommended_and_never_written(tmp_path: Path) -> None:
    store = StoreBuilder(tmp_path / "volcano.duckdb")
    store.quota(VOLCANO_QUEUE, "org1", "nvidia.com/gpu", tenant="org1", nominal=20, usage=[5] * (15 * 288))
    report = recommend(store.save(), RecommendSettings(targets=("kueue", "kai")), clock=lambda: datetime(2026, 12, 1))
    assert [(q.key.object_kind, q.key.name, q.action, q.next_value) for q in report.quotas] == [
        (VOLCANO_QUEUE, "org1", "decrease", 15)]
    assert report.plans == ()
    assert any("Queue.scheduling.volcano.sh entry recommended, not written: gpulens has no volcano writer" in n
               for n in report.notes)
