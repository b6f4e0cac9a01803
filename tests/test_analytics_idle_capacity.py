"""Idle capacity and chargeback on a hand-built fleet of three GPUs over one hour (two 30-minute buckets).

- GPU-A (H200, $3.50/h): sampled all hour; ``alpha`` holds it for the first 30 min at 50 % activity,
  then nobody. Bucket 1: alpha active 0.5 GE-h; bucket 2: unallocated 0.5 GE-h.
- GPU-B (H200): samples only in the first 30 min, ``beta`` holds it at 1 % activity with 10 GiB used.
  Bucket 1: beta idle 0.5 GE-h holding 5 GiB-h; bucket 2: unknown 0.5 GE-h (no data is never idle).
- GPU-C (A100, $1.50/h, MIG): one 3g.40gb instance held by ``gamma`` all hour with no activity
  reading (A100 MIG) -> allocated-unmeasured 3/7 x 0.5 per bucket; the 4 unpartitioned slices are
  unallocated 4/7 x 0.5 per bucket.
Fleet cost: 2 x 3.50 + 1.50 = $8.50.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from tests.support.analytics_fleet import GIB, T0, Fleet

END = T0 + timedelta(hours=1)
B2 = T0 + timedelta(minutes=30)


def build(path: Path) -> None:
    f = Fleet(path)
    f.node("n1")
    f.node("n2", model="A100", mode="mig")
    f.gpu("GPU-A", "n1")
    f.gpu("GPU-B", "n1")
    f.gpu("GPU-C", "n2", model="A100", mode="mig")
    f.mig("MIG-C1", "GPU-C", "n2", "3g.40gb", model="A100")
    f.samples("GPU-A", count=30, activity=0.5)
    f.samples("GPU-A", start=B2, count=30, activity=0.0)
    f.alloc("GPU-A", "alpha", count=30)
    f.samples("GPU-B", count=30, activity=0.01, memory=10 * GIB)
    f.alloc("GPU-B", "beta", count=30)
    f.samples("MIG-C1", count=60, activity=None)
    f.alloc("MIG-C1", "gamma", count=60, ge=3 / 7)
    f.close()


def settings(**kw: object) -> AnalysisSettings:
    return AnalysisSettings.model_validate({"window_seconds": "1h", "bucket_seconds": "30m", "end": END, **kw})


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    build(path)
    return path


def rows(path: Path, sql: str, params: list[object] | None = None) -> list[tuple]:
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def test_each_bucket_splits_into_the_states_worked_out_by_hand(store: Path) -> None:
    summary = analyze(store, settings())
    got = {
        (b, d, t, s): round(ge, 6)
        for b, d, t, s, ge in rows(
            store,
            "SELECT bucket_start, device_id, tenant, state, ge_hours FROM idle_capacity WHERE run_id = ?",
            [summary.run_id],
        )
    }
    assert got == {
        (T0, "GPU-A", "alpha", "allocated-active"): 0.5,
        (B2, "GPU-A", None, "unallocated"): 0.5,
        (T0, "GPU-B", "beta", "allocated-idle"): 0.5,
        (B2, "GPU-B", None, "unknown"): 0.5,
        (T0, "MIG-C1", "gamma", "allocated-unmeasured"): round(3 / 7 * 0.5, 6),
        (B2, "MIG-C1", "gamma", "allocated-unmeasured"): round(3 / 7 * 0.5, 6),
        (T0, "GPU-C", None, "unallocated"): round(4 / 7 * 0.5, 6),
        (B2, "GPU-C", None, "unallocated"): round(4 / 7 * 0.5, 6),
    }
    assert summary.sample_interval_seconds == 60


def test_memory_held_while_idle_is_reported_beside_the_idle_hours(store: Path) -> None:
    summary = analyze(store, settings())
    [(mem_bh, avg)] = rows(
        store,
        "SELECT memory_byte_hours, memory_avg_bytes FROM idle_capacity WHERE run_id = ? AND state = 'allocated-idle'",
        [summary.run_id],
    )
    assert mem_bh == pytest.approx(5 * GIB)
    assert avg == pytest.approx(10 * GIB)
    [beta] = [t for t in summary.idle_by_tenant if t.tenant == "beta"]
    assert beta.idle_memory_gib_hours == pytest.approx(5.0)


def test_money_follows_the_model_price(store: Path) -> None:
    summary = analyze(store, settings())
    cost = dict(
        rows(store, "SELECT state, round(sum(cost_usd), 6) FROM idle_capacity WHERE run_id = ? GROUP BY state",
             [summary.run_id])
    )
    assert cost == {
        "allocated-active": 1.75,
        "allocated-idle": 1.75,
        "unknown": 1.75,
        "unallocated": round(1.75 + 4 / 7 * 1.5, 6),
        "allocated-unmeasured": round(3 / 7 * 1.5, 6),
    }


def test_chargeback_lines_are_rounded_to_cents_and_sum_to_fleet_cost(store: Path, tmp_path: Path) -> None:
    out = tmp_path / "focus"
    summary = analyze(store, settings(out_dir=out))
    lines = {
        (acct, state, model): cost
        for acct, state, model, cost in rows(
            store,
            'SELECT "SubAccountId", "x_CostState", "x_GpuModel", "BilledCost" FROM chargeback WHERE run_id = ?',
            [summary.run_id],
        )
    }
    # gamma 0.642857 -> 0.64 and unallocated A100 0.857142 -> 0.86: the cent left over goes to the larger remainder.
    assert lines == {
        ("alpha", "active", "H200"): Decimal("1.75"),
        ("beta", "idle", "H200"): Decimal("1.75"),
        ("gamma", "unmeasured", "A100"): Decimal("0.64"),
        ("__unallocated__", "unallocated", "H200"): Decimal("1.75"),
        ("__unallocated__", "unallocated", "A100"): Decimal("0.86"),
        ("__unknown__", "unknown", "H200"): Decimal("1.75"),
    }
    assert summary.fleet_cost_usd == Decimal("8.50")
    assert summary.chargeback_total_usd == Decimal("8.50")
    assert summary.reconciled
    csv_text = (out / "chargeback_focus.csv").read_text()
    header = csv_text.splitlines()[0]
    for col in ("BilledCost", "EffectiveCost", "ListCost", "ContractedCost", "ChargePeriodStart", "ChargePeriodEnd",
                "ChargeCategory", "ServiceName", "ServiceCategory", "ResourceId", "ResourceName", "SubAccountId",
                "Tags", "x_CostState"):
        assert f'"{col}"' in header
    import pyarrow.parquet as pq

    assert pq.read_table(out / "chargeback_focus.parquet").num_rows == 6


def test_mig_prorated_by_memory_charges_memory_slices(store: Path) -> None:
    summary = analyze(store, settings(mig_proration="memory"))
    lines = dict(
        rows(store, """SELECT "SubAccountId", "BilledCost" FROM chargeback WHERE run_id = ? AND "x_GpuModel" = 'A100'""",
             [summary.run_id])
    )
    # 3g.40gb holds 4 of 8 memory slices: half of $1.50.
    assert lines == {"gamma": Decimal("0.75"), "__unallocated__": Decimal("0.75")}
    assert summary.reconciled


@pytest.mark.parametrize(
    ("policy", "alpha", "beta", "gamma"),
    [
        # unallocated $2.607143 (1.75 + 0.857143): even thirds of 0.869048 each; proportional to the
        # allocated cost 1.75 : 1.75 : 0.642857 (of 4.142857): 1.101293, 1.101293, 0.404557.
        ("even", Decimal("2.62"), Decimal("2.62"), Decimal("1.51")),
        ("proportional", Decimal("2.85"), Decimal("2.85"), Decimal("1.05")),
    ],
)
def test_unallocated_cost_can_be_shared_between_tenants(
    store: Path, policy: str, alpha: Decimal, beta: Decimal, gamma: Decimal
) -> None:
    summary = analyze(store, settings(unallocated=policy))
    per_account = dict(
        rows(store, 'SELECT "SubAccountId", sum("BilledCost") FROM chargeback WHERE run_id = ? GROUP BY ALL',
             [summary.run_id])
    )
    assert per_account == {"alpha": alpha, "beta": beta, "gamma": gamma, "__unknown__": Decimal("1.75")}
    assert summary.reconciled


def test_running_twice_replaces_the_rows_of_the_same_window_and_parameters(store: Path) -> None:
    first = analyze(store, settings())
    again = analyze(store, settings())
    other = analyze(store, settings(activity_threshold=0.6))
    assert first.run_id == again.run_id != other.run_id
    counts = dict(rows(store, "SELECT run_id, count(*) FROM idle_capacity GROUP BY run_id"))
    assert counts == {first.run_id: 8, other.run_id: 8}
    assert rows(store, "SELECT count(*) FROM analysis_runs") == [(2,)]


def test_a_collection_gap_turns_samples_into_unknown_not_idle(store: Path) -> None:
    f = Fleet(store)
    f.gap("n1", T0, T0 + timedelta(minutes=10))
    f.close()
    summary = analyze(store, settings())
    got = dict(
        rows(store, """SELECT state, round(sum(ge_hours), 6) FROM idle_capacity
                       WHERE run_id = ? AND device_id = 'GPU-A' AND bucket_start = ? GROUP BY state""",
             [summary.run_id, T0])
    )
    assert got == {"unknown": round(10 / 60, 6), "allocated-active": round(20 / 60, 6)}


def test_samples_of_a_device_the_inventory_does_not_list_still_tell_the_sample_interval(tmp_path: Path) -> None:
    """GPU-A (listed) reports once per 30-minute bucket, so its own samples tell no spacing; GPU-Z, which
    the inventory does not list, reports every 60 s. The interval is 60 s (not the bucket), and GPU-Z
    has no idle rows of its own."""
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n1")
    f.gpu("GPU-A", "n1")
    f.samples("GPU-A", count=2, every=1800, activity=0.0)
    f.con.executemany(
        """INSERT INTO device_samples (ts, node, gpu_uuid, device_id, activity_ratio, memory_used_bytes, source)
           VALUES (?, 'n1', 'GPU-Z', 'GPU-Z', 0.5, NULL, 'test')""",
        [[T0 + timedelta(seconds=60 * i)] for i in range(60)],
    )
    f.close()
    summary = analyze(path, settings())
    assert summary.sample_interval_seconds == 60
    devices = {d for (d,) in rows(path, "SELECT DISTINCT device_id FROM idle_capacity WHERE run_id = ?",
                                  [summary.run_id])}
    assert devices == {"GPU-A"}
