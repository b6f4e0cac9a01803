"""Quota policy: percentile + headroom, rounding, floors, pending demand, step limit, MIG conversions."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.facts import bind_facts
from analytics.quota import (
    QuotaEvidence,
    QuotaKey,
    QuotaSettings,
    load_quota_evidence,
    propose_mig_conversions,
    recommend_quota,
)
from analytics.rightsizing import MigFitSettings, MigFitStrategy, load_workload_usage
from tests.support.recommend_store import T0, StoreBuilder, gib

SETTINGS = QuotaSettings()
WEEK_BUCKETS = 7 * 288
CUT_BUCKETS = 15 * 288


def evidence(**overrides: object) -> QuotaEvidence:
    """A ClusterQueue entry with 15 days of 5-minute buckets (enough to cut) unless overridden."""
    base = QuotaEvidence(
        key=QuotaKey("ClusterQueue", "", "team-a", "h100", "nvidia.com/gpu"), tenant="team-a", nominal=20,
        borrowing_limit=None, lending_limit=None, annotations={}, usage_now=4, pending_now=0, pending_max=0,
        pending_buckets=0, buckets=CUT_BUCKETS, demand_lower=3, demand_target=7, demand_upper=9, demand_max=10,
        first_seen=T0, last_seen=T0 + timedelta(minutes=5 * (CUT_BUCKETS - 1)),
    )
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


def test_target_is_the_percentile_plus_headroom_rounded_up_to_whole_units() -> None:
    rec = recommend_quota(evidence(nominal=9, demand_target=7), SETTINGS)
    assert rec.uncapped_target == 9  # 7 * 1.15 = 8.05 -> 9
    assert rec.recommended == 9
    assert rec.action == "hold"
    exact = recommend_quota(evidence(nominal=9, demand_target=8 / 1.15), SETTINGS)
    assert exact.uncapped_target == 8  # no spurious round-up on floating-point noise


def test_never_below_current_usage_plus_pending() -> None:
    rec = recommend_quota(evidence(nominal=12, demand_target=2, usage_now=9, pending_now=2, pending_buckets=1),
                          SETTINGS)
    assert rec.recommended is not None and rec.recommended >= 11
    low = recommend_quota(evidence(nominal=12, demand_target=2, usage_now=10), SETTINGS)
    assert low.recommended == 10
    assert any("current usage" in r for r in low.reasons)


def test_pending_demand_in_the_window_blocks_any_cut() -> None:
    rec = recommend_quota(evidence(nominal=20, demand_target=5, usage_now=3, pending_buckets=4, pending_max=2),
                          SETTINGS)
    assert (rec.recommended, rec.next_value, rec.action) == (20, 20, "hold")
    assert any("pending demand" in r and "no cut" in r for r in rec.reasons)


def test_pending_demand_does_not_block_an_increase() -> None:
    rec = recommend_quota(evidence(nominal=8, demand_target=10, usage_now=8, pending_now=2, pending_buckets=50),
                          SETTINGS)
    assert rec.action == "increase"
    assert rec.recommended == 12


def test_one_apply_moves_at_most_the_step_limit() -> None:
    down = recommend_quota(evidence(nominal=20, demand_target=2, usage_now=1), SETTINGS)
    assert (down.recommended, down.next_value, down.action) == (3, 15, "decrease")
    up = recommend_quota(evidence(nominal=8, demand_target=30, usage_now=8), SETTINGS)
    assert (up.recommended, up.next_value) == (35, 10)
    small = recommend_quota(evidence(nominal=2, demand_target=0, usage_now=0), SETTINGS)
    assert small.next_value == 1  # a small quota can always move one unit
    wide = recommend_quota(evidence(nominal=20, demand_target=2, usage_now=1), QuotaSettings(max_step=1.0))
    assert wide.next_value == 3


def test_bounds_bracket_the_recommendation_and_widen_with_low_confidence() -> None:
    sure = recommend_quota(evidence(), SETTINGS)
    assert sure.lower_bound is not None and sure.upper_bound is not None and sure.recommended is not None
    assert sure.lower_bound <= sure.recommended <= sure.upper_bound
    short = recommend_quota(evidence(buckets=288, first_seen=T0, last_seen=T0 + timedelta(hours=24)), SETTINGS)
    assert short.confidence.is_low
    assert short.upper_bound is not None and short.upper_bound > sure.upper_bound


def test_too_few_buckets_give_no_recommendation() -> None:
    rec = recommend_quota(evidence(buckets=5), SETTINGS)
    assert rec.action == "insufficient_data"
    assert rec.recommended is None and rec.next_value is None


@given(
    nominal=st.integers(0, 200), target=st.floats(0, 300), usage=st.integers(0, 200), pending=st.integers(0, 50),
    pending_buckets=st.integers(0, 10), step=st.floats(0.05, 1.0),
)
def test_guard_rails_hold_for_any_evidence(
    nominal: int, target: float, usage: int, pending: int, pending_buckets: int, step: float
) -> None:
    settings = QuotaSettings(max_step=step)
    rec = recommend_quota(
        evidence(nominal=nominal, demand_target=target, usage_now=usage, pending_now=pending,
                 pending_buckets=max(pending_buckets, 1 if pending else 0)),
        settings,
    )
    assert rec.recommended is not None and rec.next_value is not None
    assert rec.recommended >= usage + pending
    if pending_buckets or pending:
        assert rec.next_value >= nominal
    allowed = max(1, int(nominal * step + 1e-9))
    assert abs(rec.next_value - nominal) <= allowed
    if rec.next_value < nominal:
        assert rec.next_value >= rec.recommended


def build_quota_store(path: Path) -> Path:
    store = StoreBuilder(path)
    n = WEEK_BUCKETS
    store.quota("ClusterQueue", "team-a", "nvidia.com/gpu", flavor="h100", tenant="team-a", nominal=16,
                usage=[4 + (i % 4) for i in range(n)], borrowing_limit=4)
    store.quota("ClusterQueue", "team-b", "nvidia.com/gpu", flavor="h100", tenant="team-b", nominal=4,
                usage=[4] * n)
    store.pending("team-b", "nvidia.com/gpu", {i: 3 for i in range(n - 100, n)}, cluster_queue="team-b")
    store.pending("team-b", "nvidia.com/gpu", {i: 9 for i in range(n - 100, n)}, cluster_queue="other-queue")
    store.quota("ResourceQuota", "gpu-quota", "requests.nvidia.com/gpu", namespace="ns-c", nominal=8,
                usage=[None] * n)
    for g in range(2):
        store.device(f"g{g}", "H100")
    store.workload("ns-c", "Deployment", "svc", {"svc-0": ["g0"], "svc-1": ["g1"]}, samples=n,
                   activity=lambda i: 0.5, memory=lambda i: gib(20))
    return store.save()


def load(path: Path) -> dict[str, QuotaEvidence]:
    with duckdb.connect(str(path)) as con:
        bind_facts(con, None)  # the loaders read the f_* fact views
        end = datetime(2026, 11, 8)
        return {e.key.name: e for e in load_quota_evidence(con, end - timedelta(days=14), end, SETTINGS)}


def test_demand_from_the_store_adds_this_queues_pending_only(tmp_path: Path) -> None:
    ev = load(build_quota_store(tmp_path / "q.duckdb"))
    a, b = ev["team-a"], ev["team-b"]
    assert (a.key.flavor, a.key.resource, a.nominal, a.borrowing_limit) == ("h100", "nvidia.com/gpu", 16, 4)
    assert a.demand_max == 7 and a.pending_buckets == 0
    assert b.demand_max == 7  # 4 in use + 3 pending for team-b; the other queue's 9 do not count
    assert b.pending_now == 3 and b.pending_buckets == 100
    assert b.buckets == WEEK_BUCKETS


def test_resourcequota_usage_falls_back_to_device_allocations(tmp_path: Path) -> None:
    ev = load(build_quota_store(tmp_path / "q.duckdb"))["gpu-quota"]
    assert ev.key.resource == "nvidia.com/gpu"  # 'requests.' prefix normalised away
    assert ev.usage_from_allocations
    assert ev.usage_now == 2 and ev.demand_max == 2
    rec = recommend_quota(ev, QuotaSettings(min_cut_days=7))  # a week of evidence
    assert rec.recommended == 3 and rec.next_value == 6
    assert any("counted from device allocations" in r for r in rec.reasons)


def test_mig_conversion_is_proposed_only_where_memory_and_compute_fit(tmp_path: Path) -> None:
    store = StoreBuilder(tmp_path / "w.duckdb")
    for g in range(4):
        store.device(f"g{g}", "H200")
    small = {"fits-0": ["g0"], "fits-1": ["g1"]}
    store.workload("team-a", "Deployment", "fits", small, samples=WEEK_BUCKETS, tenant="team-a",
                   activity=lambda i: 0.05 if i % 10 == 0 else 0.0, memory=lambda i: gib(12))
    store.workload("team-a", "Deployment", "too-much-memory", {"mem-0": ["g2"]}, samples=WEEK_BUCKETS,
                   tenant="team-a", activity=lambda i: 0.0, memory=lambda i: gib(120))
    store.workload("team-a", "Deployment", "too-much-compute", {"cpu-0": ["g3"]}, samples=WEEK_BUCKETS,
                   tenant="team-a", activity=lambda i: 0.9, memory=lambda i: gib(4))
    store.quota("ClusterQueue", "team-a", "nvidia.com/gpu", flavor="h200", tenant="team-a", nominal=4,
                usage=[4] * WEEK_BUCKETS)
    path = store.save()
    with duckdb.connect(str(path)) as con:
        bind_facts(con, None)  # the loaders read the f_* fact views
        end = datetime(2026, 11, 8)
        usages = load_workload_usage(con, end - timedelta(days=14), end)
        quotas = [recommend_quota(e, SETTINGS) for e in load_quota_evidence(con, end - timedelta(days=14), end,
                                                                             SETTINGS)]
    workloads = [MigFitStrategy(MigFitSettings()).run(u, 300) for u in usages]
    conversions = propose_mig_conversions(workloads, quotas)
    assert len(conversions) == 1
    c = conversions[0]
    assert (c.tenant, c.profile, c.whole_gpus, c.mig_instances, c.gpus_needed) == ("team-a", "1g.18gb", 2, 2, 1)
    assert c.workloads == ("team-a/Deployment/fits",)
    assert c.queue is not None and c.queue.name == "team-a"
    assert c.to_resource == "nvidia.com/mig-1g.18gb"


def test_low_confidence_workloads_are_not_proposed_for_conversion(tmp_path: Path) -> None:
    store = StoreBuilder(tmp_path / "w.duckdb")
    store.device("g0", "H200")
    store.workload("team-a", "Deployment", "young", {"young-0": ["g0"]}, samples=288, tenant="team-a",
                   activity=lambda i: 0.0, memory=lambda i: gib(12))
    path = store.save()
    with duckdb.connect(str(path)) as con:
        bind_facts(con, None)  # the loaders read the f_* fact views
        end = datetime(2026, 11, 8)
        usages = load_workload_usage(con, end - timedelta(days=14), end)
    (rec,) = [MigFitStrategy(MigFitSettings()).run(u, 300) for u in usages]
    assert rec.recommended_profile == "1g.18gb" and rec.confidence.is_low
    assert propose_mig_conversions([rec], []) == []


@pytest.mark.parametrize("bad", [{"percentile": 0}, {"max_step": -1}, {"headroom": 5}, {"unknown": 1}])
def test_invalid_settings_are_rejected(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        QuotaSettings(**bad)  # type: ignore[arg-type]


def test_no_increase_on_headroom_alone_when_nothing_waited() -> None:
    full = recommend_quota(evidence(nominal=10, demand_target=10, demand_max=10, usage_now=10), SETTINGS)
    assert (full.uncapped_target, full.recommended, full.action) == (12, 10, "hold")
    assert any("no increase on headroom alone" in r for r in full.reasons)
    borrowing = recommend_quota(evidence(nominal=10, demand_target=12, demand_max=13, usage_now=12), SETTINGS)
    assert borrowing.action == "increase"


def test_a_target_below_the_observed_peak_or_at_zero_is_flagged() -> None:
    below = recommend_quota(evidence(nominal=20, demand_target=2, demand_max=10, usage_now=1), SETTINGS)
    assert below.recommended == 3
    assert any("below the observed peak demand 10" in r for r in below.reasons), below.reasons
    zero = recommend_quota(evidence(nominal=2, demand_target=0, demand_lower=0, demand_max=0, usage_now=0), SETTINGS)
    assert zero.recommended == 0
    assert any("target 0 admits nothing" in r for r in zero.reasons), zero.reasons
    covered = recommend_quota(evidence(nominal=9, demand_target=7, demand_max=9), SETTINGS)
    assert not any(r.startswith("flag:") for r in covered.reasons)


@given(days=st.floats(0.5, 13.9), target=st.floats(0, 300), nominal=st.integers(1, 200))
def test_evidence_shorter_than_min_cut_days_never_cuts(days: float, target: float, nominal: int) -> None:
    buckets = max(SETTINGS.min_buckets, int(days * 288))
    rec = recommend_quota(
        evidence(nominal=nominal, demand_target=target, usage_now=0, buckets=buckets, first_seen=T0,
                 last_seen=T0 + timedelta(minutes=5 * (buckets - 1))),
        SETTINGS,
    )
    assert rec.next_value is not None and rec.next_value >= nominal


@given(history_pending=st.integers(1, 500), target=st.floats(0, 300), nominal=st.integers(1, 200))
def test_a_cut_the_stored_history_contradicts_is_refused(history_pending: int, target: float, nominal: int) -> None:
    window = evidence(nominal=nominal, demand_target=target, usage_now=0)
    longer = dataclasses.replace(window, buckets=window.buckets * 2, first_seen=T0 - timedelta(days=15),
                                 pending_buckets=history_pending)
    rec = recommend_quota(window, SETTINGS, longer)
    assert rec.next_value is not None and rec.next_value >= nominal


def test_pending_pods_of_the_inventory_count_when_kueue_gives_no_pending_metric(tmp_path: Path) -> None:
    store = StoreBuilder(tmp_path / "pods.duckdb")
    n = CUT_BUCKETS
    store.quota("ClusterQueue", "team-a", "nvidia.com/gpu", flavor="h100", tenant="team-a", nominal=16,
                usage=[4] * n)
    store.quota("LocalQueue", "lq-a", "nvidia.com/gpu", namespace="ns-a", flavor="h100", nominal=0,
                usage=[None], annotations={"clusterQueue": "team-a"})
    path = store.save()
    with duckdb.connect(str(path)) as con:
        bind_facts(con, None)  # the loaders read the f_* fact views
        con.execute(
            """INSERT INTO pod_snapshots (ts, namespace, pod, phase, queue, gpu_requests, source)
               VALUES (?, 'ns-a', 'waiting-0', 'Pending', 'lq-a', '{"nvidia.com/gpu": 8}', 'kubernetes'),
                      (?, 'ns-a', 'running-0', 'Running', 'lq-a', '{"nvidia.com/gpu": 4}', 'kubernetes')""",
            [store.ts(n - 10), store.ts(n - 10)],
        )
        end = store.ts(n)
        (ev,) = [e for e in load_quota_evidence(con, end - timedelta(days=16), end, SETTINGS)
                 if e.key.object_kind == "ClusterQueue"]
    assert ev.pending_buckets == 1 and ev.pending_pod_buckets == 1
    assert ev.demand_max == 12  # 4 in use + 8 requested by the pending pod
    rec = recommend_quota(ev, SETTINGS)
    assert rec.action == "hold" and rec.next_value == 16
    assert any("pending pods of the Kubernetes inventory" in r for r in rec.reasons)
