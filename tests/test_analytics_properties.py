"""Properties of analyze on random small fleets: capacity is conserved, money reconciles, risk adds up."""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analytics.run import analyze
from analytics.settings import AnalysisSettings, RiskWeights
from tests.support.analytics_fleet import T0, Fleet

MINUTES = 30
END = T0 + timedelta(minutes=MINUTES)
TENANTS = ["a", "b", "c"]
PRICE = {"H200": Decimal("3.5"), "A100": Decimal("1.5")}

minute = st.tuples(
    st.booleans(),  # sampled this minute
    st.one_of(st.none(), st.floats(0, 1)),  # activity
    st.lists(st.sampled_from(TENANTS), max_size=2, unique=True),  # holders
)
device_plan = st.lists(minute, min_size=MINUTES, max_size=MINUTES)


def build(path: Path, plans: list[list[tuple[bool, float | None, list[str]]]], no_policy: set[str]) -> None:
    """GPU-0 exclusive H200, GPU-1 time-sliced H200 (2 replicas), GPU-2 A100 MIG with 3g.40gb + 1g.10gb."""
    f = Fleet(path)
    f.node("n0", nvlink_domain="d")
    f.node("n1", model="A100", mode="mig", nvlink_domain="d")
    f.gpu("GPU-0", "n0")
    f.gpu("GPU-1", "n0", mode="time-slicing", replicas=2)
    f.gpu("GPU-2", "n1", model="A100", mode="mig")
    f.mig("MIG-3g", "GPU-2", "n1", "3g.40gb", model="A100", gi=1)
    f.mig("MIG-1g", "GPU-2", "n1", "1g.10gb", model="A100", gi=2)
    devices = [("GPU-0", 1.0, 1), ("GPU-1", 0.5, 2), ("MIG-3g", 3 / 7, 1), ("MIG-1g", 1 / 7, 1)]
    for (device, share, max_holders), plan in zip(devices, plans, strict=True):
        f.readings(device, [(T0 + timedelta(minutes=i), activity, None)
                            for i, (sampled, activity, _h) in enumerate(plan) if sampled])
        f.holders(device, [(T0 + timedelta(minutes=i), tenant, f"ns-{tenant}", f"p{n}", share)
                           for i, (_s, _a, holders) in enumerate(plan) for n, tenant in enumerate(holders[:max_holders])])
    for tenant in TENANTS:
        f.namespace(f"ns-{tenant}", tenant, policies=0 if tenant in no_policy else 1)
    f.close()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plans=st.lists(device_plan, min_size=4, max_size=4),
    threshold=st.floats(0, 1),
    policy=st.sampled_from(["own-line", "even", "proportional"]),
    proration=st.sampled_from(["slices", "memory"]),
)
def test_states_fill_capacity_and_chargeback_sums_to_fleet_cost(
    plans: list[list[tuple[bool, float | None, list[str]]]], threshold: float, policy: str, proration: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.duckdb"
        build(path, plans, set())
        summary = analyze(
            path,
            AnalysisSettings(
                window_seconds=MINUTES * 60, bucket_seconds=900, end=END, activity_threshold=threshold,
                unallocated=policy, mig_proration=proration, sample_interval_seconds=60,
            ),
        )
        con = duckdb.connect(str(path), read_only=True)
        per_device = con.execute(
            "SELECT device_id, bucket_start, sum(ge_hours), sum(cost_usd) FROM idle_capacity WHERE run_id = ? "
            "GROUP BY ALL",
            [summary.run_id],
        ).fetchall()
        per_gpu: dict[tuple[str, object], float] = defaultdict(float)
        capacity = {"GPU-0": 1.0, "GPU-1": 1.0, "MIG-3g": 3 / 7, "MIG-1g": 1 / 7, "GPU-2": 3 / 7}
        for device, bucket, ge_hours, cost in per_device:
            assert abs(ge_hours - capacity[device] * 0.25) < 1e-9, (device, bucket)
            per_gpu[("GPU-2" if device.startswith("MIG") else device, bucket)] += cost
        for (gpu, _), cost in per_gpu.items():
            price = 1.5 if gpu == "GPU-2" else 3.5
            assert abs(cost - price * 0.25) < 1e-9
        billed = con.execute(
            'SELECT sum("BilledCost"), sum("ListCost") FROM chargeback WHERE run_id = ?', [summary.run_id]
        ).fetchone()
        con.close()
        fleet = (2 * PRICE["H200"] + PRICE["A100"]) * Decimal(MINUTES) / 60
        assert billed == (fleet, fleet)
        assert summary.reconciled


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plans=st.lists(device_plan, min_size=4, max_size=4),
    no_policy=st.sets(st.sampled_from(TENANTS)),
    weights=st.builds(
        RiskWeights,
        **{name: st.floats(0, 80) for name in RiskWeights.model_fields},
    ),
)
def test_risk_is_within_0_and_100_and_equals_the_sum_of_its_terms(
    plans: list[list[tuple[bool, float | None, list[str]]]], no_policy: set[str], weights: RiskWeights
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.duckdb"
        build(path, plans, no_policy)
        summary = analyze(path, AnalysisSettings(window_seconds=MINUTES * 60, bucket_seconds=900, end=END, risk=weights))
        con = duckdb.connect(str(path), read_only=True)
        rows = con.execute("SELECT score, terms FROM isolation_risk WHERE run_id = ?", [summary.run_id]).fetchall()
        con.close()
        assert len(rows) >= 3
        for score, terms in rows:
            assert 0 <= score <= 100
            assert abs(score - sum(t["points"] for t in json.loads(terms))) < 1e-9
