"""Isolation risk on a hand-built node (default weights, one hour).

Node n3 (NVLink domain d1): GPU-TS time-sliced, shared by ``t1`` (namespace with a NetworkPolicy)
and ``t2`` (namespace without one), with three XID 13 events; GPU-X exclusive, held by ``t3`` whose
namespace has a policy and who has a dedicated pool. Worked out by hand:
- GPU-TS: time-slicing 40 + 1 other tenant on the GPU 10 + 1 other tenant on the node 2 + blind
  spot 10 + 3 faults x 5 = 15 + t2 lacks a NetworkPolicy 10 + t1/t2 lack a pool or vcluster 5 = 92.
- t2 (worst GPU is GPU-TS): 40 + 10 + 2 + 10 + 15 + 10 + 5 = 92; t1: the same without the policy
  term = 82; t3 on GPU-X: exclusive 0 + 2 other tenants on the node 4 = 4.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.run import analyze
from analytics.settings import AnalysisSettings, RiskWeights
from tests.support.analytics_fleet import T0, Fleet

END = T0 + timedelta(hours=1)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n3", nvlink_domain="d1")
    f.gpu("GPU-TS", "n3", mode="time-slicing", replicas=4)
    f.gpu("GPU-X", "n3")
    f.samples("GPU-TS", count=60, activity=0.4)
    f.samples("GPU-X", count=60, activity=0.9)
    f.alloc("GPU-TS", "t1", count=60, ge=0.25, namespace="ns-t1", pod="a")
    f.alloc("GPU-TS", "t2", count=60, ge=0.25, namespace="ns-t2", pod="b")
    f.alloc("GPU-X", "t3", count=60, namespace="ns-t3")
    f.namespace("ns-t1", "t1", policies=2)
    f.namespace("ns-t2", "t2", policies=0)
    f.namespace("ns-t3", "t3", policies=1)
    f.tenant("t3", dedicated_pool="pool-t3")
    f.xid("GPU-TS", 13, T0 + timedelta(minutes=7), count=3)
    f.close()
    return path


def risk_rows(path: Path, run_id: str) -> dict[tuple[str, str | None], tuple[float, list[dict]]]:
    con = duckdb.connect(str(path), read_only=True)
    rows = con.execute(
        "SELECT scope, coalesce(tenant, gpu_uuid), score, terms FROM isolation_risk WHERE run_id = ?", [run_id]
    ).fetchall()
    con.close()
    return {(s, k): (score, json.loads(terms)) for s, k, score, terms in rows}


def test_scores_are_the_hand_worked_sums_of_their_terms(store: Path) -> None:
    summary = analyze(store, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=END))
    got = risk_rows(store, summary.run_id)
    scores = {k: v[0] for k, v in got.items()}
    assert scores == {
        ("device", "GPU-TS"): 92,
        ("device", "GPU-X"): 4,
        ("tenant", "t1"): 82,
        ("tenant", "t2"): 92,
        ("tenant", "t3"): 4,
    }
    t2_terms = {t["term"]: t["points"] for t in got[("tenant", "t2")][1]}
    assert t2_terms == {
        "sharing_mode": 40,
        "gpu_cotenants": 10,
        "node_cotenants": 2,
        "telemetry_blind_spot": 10,
        "shared_faults": 15,
        "no_network_policy": 10,
        "no_dedicated_pool_or_vcluster": 5,
    }
    assert "ns-t2" in next(t["reason"] for t in got[("tenant", "t2")][1] if t["term"] == "no_network_policy")
    assert [r.tenant for r in summary.top_risk_tenants] == ["t2", "t1", "t3"]


def test_a_sum_past_100_shows_the_cap_as_a_term(store: Path) -> None:
    weights = RiskWeights(mode_time_slicing=95)
    summary = analyze(store, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=END, risk=weights))
    score, terms = risk_rows(store, summary.run_id)[("tenant", "t2")]
    assert score == 100
    assert sum(t["points"] for t in terms) == 100
    assert terms[-1]["term"] == "cap" and terms[-1]["points"] == -47


def test_an_exclusive_gpu_alone_on_its_node_with_all_layers_scores_zero(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("solo")
    f.gpu("GPU-S", "solo")
    f.samples("GPU-S", count=60)
    f.alloc("GPU-S", "safe", count=60)
    f.namespace("safe", "safe", policies=1, vcluster="vc-safe")
    f.close()
    summary = analyze(path, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=END))
    got = risk_rows(path, summary.run_id)
    assert got[("tenant", "safe")] == (0, [{"term": "sharing_mode", "points": 0, "reason": "sharing mode exclusive"}])


def terms_of(path: Path, run_id: str) -> dict[tuple[str, str | None], dict[str, dict]]:
    return {k: {t["term"]: t for t in terms} for k, (_, terms) in risk_rows(path, run_id).items()}


def test_a_store_without_kubernetes_inventory_says_layers_were_not_collected(tmp_path: Path) -> None:
    path = tmp_path / "samples-only.duckdb"
    f = Fleet(path)
    f.node("n1")
    f.gpu("GPU-A", "n1")
    f.gpu("GPU-B", "n1")
    f.samples("GPU-A", count=60, activity=0.5)
    f.samples("GPU-B", count=60, activity=0.5)
    f.alloc("GPU-A", "t1", count=60, namespace="ns-t1")
    f.alloc("GPU-B", "t2", count=60, namespace="ns-t2")
    f.close()
    summary = analyze(path, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=END))
    for key, terms in terms_of(path, summary.run_id).items():
        assert "no_network_policy" not in terms and "no_dedicated_pool_or_vcluster" not in terms, key
        policy, pool = terms["network_policy_not_collected"], terms["dedicated_pool_not_collected"]
        assert "NetworkPolicies not collected" in policy["reason"]
        for t in (policy, pool):
            assert "gpulens collect --kubernetes" in t["reason"] and "not collected" in t["reason"]
        assert policy["points"] == RiskWeights().no_network_policy  # the blind spot is weighed, and says so


def test_a_namespace_the_inventory_never_saw_is_unknown_not_without_policy(tmp_path: Path) -> None:
    path = tmp_path / "partial.duckdb"
    f = Fleet(path)
    f.node("n1")
    f.gpu("GPU-A", "n1")
    f.gpu("GPU-B", "n1")
    f.samples("GPU-A", count=60)
    f.samples("GPU-B", count=60)
    f.alloc("GPU-A", "t1", count=60, namespace="ns-seen")
    f.alloc("GPU-B", "t2", count=60, namespace="ns-unseen")
    f.namespace("ns-seen", "t1", policies=0)
    f.close()
    summary = analyze(path, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=END))
    terms = terms_of(path, summary.run_id)
    assert "ns-seen" in terms[("tenant", "t1")]["no_network_policy"]["reason"]
    assert "network_policy_not_collected" not in terms[("tenant", "t1")]
    assert "ns-unseen" in terms[("tenant", "t2")]["network_policy_not_collected"]["reason"]
    assert "no_network_policy" not in terms[("tenant", "t2")]
    # the inventory was collected: a missing pool is a measured absence
    assert "no_dedicated_pool_or_vcluster" in terms[("tenant", "t2")]
