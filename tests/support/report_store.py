"""A small hand-built store for the report and Streamlit tests: real DuckDB, real schema, known numbers.

Two nodes: ``node-h200`` (one H200 in MIG mode: a 3g.71gb and two 1g.18gb instances) and ``node-a100``
(two whole A100 GPUs). Six hours of 5-minute samples. Tenants: ``vision`` (busy), ``nlp`` (idle) and
:data:`EVIL_TENANT`, whose name tries to break out of HTML, SQL and markdown.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb

from analytics.prices import Price, record_price
from collector.schema import create_schema
from tests.support.bulk_insert import insert_rows

EVIL_TENANT = "<script>alert(1)</script>\"'"
T0 = datetime(2026, 11, 1, 0, 0, tzinfo=UTC).replace(tzinfo=None)
STEP = timedelta(minutes=5)
SAMPLES = 72  # six hours

H200 = "GPU-h200-0"
A100_0, A100_1 = "GPU-a100-0", "GPU-a100-1"
MIG_3G, MIG_1G_A, MIG_1G_B = "MIG-h200-3g", "MIG-h200-1g-a", "MIG-h200-1g-b"

# device -> (gpu, node, kind, profile, slices, GE, memory bytes, model)
DEVICES = {
    MIG_3G: (H200, "node-h200", "mig", "3g.71gb", 3, 3 / 7, 71 * 2**30, "H200"),
    MIG_1G_A: (H200, "node-h200", "mig", "1g.18gb", 1, 1 / 7, 18 * 2**30, "H200"),
    MIG_1G_B: (H200, "node-h200", "mig", "1g.18gb", 1, 1 / 7, 18 * 2**30, "H200"),
    A100_0: (A100_0, "node-a100", "gpu", "gpu", 7, 1.0, 80 * 2**30, "A100"),
    A100_1: (A100_1, "node-a100", "gpu", "gpu", 7, 1.0, 80 * 2**30, "A100"),
}
# device -> (tenant, namespace, pod, activity ratio); A100_1 stays unallocated
HOLDERS = {
    MIG_3G: ("vision", "vision-train", "trainer-0", 0.8),
    MIG_1G_A: ("nlp", "nlp-dev", "notebook-0", 0.01),
    MIG_1G_B: (EVIL_TENANT, "evil-ns", "evil-pod", 0.02),
    A100_0: ("vision", "vision-train", "trainer-1", 0.6),
}


def build_facts(con: duckdb.DuckDBPyConnection) -> None:
    """Create the store schema and fill dimensions and facts."""
    create_schema(con)
    con.execute(
        "INSERT INTO nodes (node, pool, gpu_model, sharing_mode) VALUES "
        "('node-h200', 'shared', 'H200', 'mig'), ('node-a100', 'batch', 'A100', 'exclusive')"
    )
    con.executemany(
        "INSERT INTO gpus (gpu_uuid, node, gpu_index, gpu_model, memory_total_bytes, sharing_mode) VALUES (?, ?, ?, ?, ?, ?)",
        [(H200, "node-h200", 0, "H200", 141 * 2**30, "mig"), (A100_0, "node-a100", 0, "A100", 80 * 2**30, "exclusive"),
         (A100_1, "node-a100", 1, "A100", 80 * 2**30, "exclusive")],
    )
    con.executemany(
        "INSERT INTO devices (device_id, gpu_uuid, node, gpu_model, kind, profile, slices, gpu_equivalents, "
        "memory_total_bytes, sharing_mode) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(d, g, n, m, k, p, s, ge, mem, "mig" if k == "mig" else "exclusive")
         for d, (g, n, k, p, s, ge, mem, m) in DEVICES.items()],
    )
    con.executemany(
        "INSERT INTO tenants (tenant, cost_center) VALUES (?, ?)",
        [("vision", "cc-100"), ("nlp", "cc-200"), (EVIL_TENANT, "cc-<b>evil</b>")],
    )
    for model, usd, paid in (("H200", 4.0, 3.2), ("A100", 2.0, 1.6)):
        record_price(con, Price(model, usd, paid, "set by the test"), T0)
    samples, allocations, gpu_samples = [], [], []
    for i in range(SAMPLES):
        ts = T0 + i * STEP
        for device, (gpu, node, _k, _p, _s, ge, mem, _m) in DEVICES.items():
            holder = HOLDERS.get(device)
            activity = holder[3] if holder else 0.0
            samples.append((ts, node, gpu, device, activity, int(mem * activity), mem, "test"))
            if holder:
                tenant, ns, pod, _a = holder
                allocations.append((ts, node, gpu, device, ns, pod, "main", tenant, "mig" if _k == "mig" else "exclusive",
                                    ge, "Job", pod.rsplit("-", 1)[0], "test"))
        for gpu, node in ((H200, "node-h200"), (A100_0, "node-a100"), (A100_1, "node-a100")):
            gpu_samples.append((ts, node, gpu, True, 300.0, 300.0 * 300 * i, 55.0, "test"))
    insert_rows(con, "device_samples", ("ts", "node", "gpu_uuid", "device_id", "activity_ratio", "memory_used_bytes",
                                        "memory_total_bytes", "source"), samples)
    insert_rows(con, "allocations", ("ts", "node", "gpu_uuid", "device_id", "namespace", "pod", "container", "tenant",
                                     "sharing_mode", "gpu_equivalents", "workload_kind", "workload_name", "source"),
                allocations)
    insert_rows(con, "gpu_samples", ("ts", "node", "gpu_uuid", "up", "power_watts", "energy_joules",
                                     "temperature_celsius", "source"), gpu_samples)
    con.execute(
        "INSERT INTO events (ts, node, gpu_uuid, kind, code, count, detail, source) VALUES (?, ?, ?, 'xid', 79, 1, ?, 'test')",
        [T0 + 30 * STEP, "node-a100", A100_1, "GPU has fallen off the bus"],
    )


def build_store(path: Path, *, with_results: bool = True) -> Path:
    """Write the fixture store at ``path``; ``with_results`` also writes the analytics result tables."""
    con = duckdb.connect(str(path))
    try:
        build_facts(con)
        if with_results:
            build_results(con)
    finally:
        con.close()
    return path


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, object]]) -> None:
    """Insert rows given as column -> value (rows naming the same columns go in together)."""
    by_columns: dict[tuple[str, ...], list[tuple[object, ...]]] = {}
    for row in rows:
        by_columns.setdefault(tuple(row), []).append(tuple(row.values()))
    for columns, values in by_columns.items():
        insert_rows(con, table, columns, values)


RUN_ID = "fixture-run-0001"
WINDOW = (T0, T0 + SAMPLES * STEP)


def build_recommendations(con: duckdb.DuckDBPyConnection) -> None:
    """A ``recommendations`` table as ``gpulens recommend`` writes it: two workloads and one quota."""
    from analytics.result_tables import ddl

    con.execute(ddl("recommendations"))
    head = {"run_id": "rec-run-1", "generated_at": WINDOW[1], "window_start": WINDOW[0], "window_end": WINDOW[1],
            "strategy": "mig-fit", "parameters": "{}"}
    _insert(con, "recommendations", [
        {**head, "scope": "workload", "tenant": "vision", "target_kind": "Job", "target_namespace": "vision-train",
         "target_name": "trainer", "gpu_model": "A100", "current_profile": "gpu", "recommended_profile": "3g.40gb",
         "current_value": 1, "recommended_value": 1, "action": "shrink", "confidence": 0.8,
         "confidence_label": "medium", "history_days": 0.25, "sample_count": 72,
         "evidence": json.dumps({"compute_p95_ge": 0.6, "memory_p99_bytes": 48 * 2**30}),
         "reasons": ["p95 compute 0.60 GE fits 3g.40gb", "memory p99 48 GiB fits 3g.40gb"]},
        {**head, "scope": "workload", "tenant": EVIL_TENANT, "target_kind": "Job", "target_namespace": "evil-ns",
         "target_name": "evil", "gpu_model": "H200", "current_profile": "1g.18gb", "recommended_profile": "1g.18gb",
         "current_value": 1, "recommended_value": 1, "action": "keep", "confidence": 0.8,
         "confidence_label": "medium", "history_days": 0.25, "sample_count": 72, "evidence": "{}",
         "reasons": [f"{EVIL_TENANT} already uses the smallest profile"]},
        {**head, "scope": "quota", "tenant": "nlp", "target_kind": "ClusterQueue", "target_namespace": "",
         "target_name": "nlp-cq", "flavor": "h200-mig", "resource": "nvidia.com/mig-1g.18gb",
         "current_value": 4, "recommended_value": 2, "next_value": 3, "action": "decrease", "confidence": 0.5,
         "confidence_label": "low", "history_days": 0.25, "sample_count": 72, "evidence": "{}",
         "reasons": ["p95 demand 1 of 4 nominal"]},
    ])


def build_quota_plan(con: duckdb.DuckDBPyConnection) -> None:
    """A ``quota_plan`` as ``gpulens plan`` records it (the real solver): one flavor, two queues."""
    from analytics.plan.model import FleetPlan, PoolCapacity, QueueDemand
    from analytics.plan.policy import PlanPolicy
    from analytics.plan.record import store_plan
    from analytics.plan.solve import solve_pool

    res = "nvidia.com/mig-1g.18gb"
    pool = solve_pool(PoolCapacity("h200-mig", res, 14, nodes=1, largest_node=14), [
        QueueDemand("nlp-cq", "nlp", "h200-mig", res, 4, 2, in_use=1, evidence_days=30),
        QueueDemand("evil-cq", EVIL_TENANT, "h200-mig", res, 6, 9, in_use=6, pending_now=3, evidence_days=30),
    ], PlanPolicy())
    store_plan(con, FleetPlan("plan0001", WINDOW[1], WINDOW[0], WINDOW[1], PlanPolicy(), (pool,)))


def build_results(con: duckdb.DuckDBPyConnection) -> None:
    """Analytics result tables for the fixture, consistent with its facts (hourly buckets)."""
    from analytics.result_tables import append_run_rows, create_result_tables

    create_result_tables(con)
    build_recommendations(con)
    build_quota_plan(con)
    run = {"run_id": RUN_ID, "window_start": WINDOW[0], "window_end": WINDOW[1]}
    _insert(con, "analysis_runs", [{
        **run, "bucket_seconds": 3600, "sample_interval_seconds": 300.0,
        "parameters": '{"idle_threshold": 0.05}', "fact_source": "store", "summary": "{}",
        "created_at": WINDOW[1],
    }])
    idle, charge = [], []
    price = {"H200": 4.0, "A100": 2.0}
    for hour in range(SAMPLES * 5 // 60):
        start = T0 + timedelta(hours=hour)
        bucket = {**run, "bucket_start": start, "bucket_end": start + timedelta(hours=1)}
        for device, (gpu, node, kind, profile, _s, ge, _mem, model) in DEVICES.items():
            holder = HOLDERS.get(device)
            if holder is None:
                tenant, state = None, "unallocated"
            else:
                tenant, state = holder[0], "allocated-active" if holder[3] >= 0.05 else "allocated-idle"
            idle.append({**bucket, "device_id": device, "gpu_uuid": gpu, "node": node, "gpu_model": model,
                         "profile": profile, "sharing_mode": "mig" if kind == "mig" else "exclusive",
                         "tenant": tenant, "state": state, "ge_hours": ge, "cost_usd": ge * price[model],
                         "samples": 12})
    # one chargeback line per account and state over the window (the fixture's day is a single day)
    lines: dict[tuple[str, str | None, str, str], float] = {}
    for row in idle:
        cost_state = {"allocated-active": "active", "allocated-idle": "idle", "unallocated": "unallocated"}[str(row["state"])]
        tenant = None if row["tenant"] is None else str(row["tenant"])
        key = (tenant or "__unallocated__", tenant, cost_state, str(row["gpu_model"]))
        lines[key] = lines.get(key, 0.0) + float(str(row["ge_hours"]))
    for (account, tenant, cost_state, model), ge_hours in sorted(lines.items(), key=lambda kv: kv[0][0]):
        cost = ge_hours * price[model]
        charge.append({
            **run, "BillingAccountId": "gpulens", "BillingCurrency": "USD",
            "BillingPeriodStart": WINDOW[0], "BillingPeriodEnd": WINDOW[1],
            "ChargePeriodStart": WINDOW[0], "ChargePeriodEnd": WINDOW[1], "ChargeCategory": "Usage",
            "ChargeDescription": f"{cost_state} {model} GPU-hours for {account}",
            "BilledCost": round(cost, 2), "EffectiveCost": round(cost, 2), "ListCost": round(cost, 2),
            "ContractedCost": round(cost * 0.8, 2), "PricingQuantity": ge_hours, "PricingUnit": "GPU-Hour",
            "ListUnitPrice": price[model], "ContractedUnitPrice": price[model] * 0.8,
            "ProviderName": "gpulens", "PublisherName": "gpulens", "InvoiceIssuerName": "gpulens",
            "ServiceName": "GPU compute", "ServiceCategory": "AI and Machine Learning",
            "ResourceId": f"gpulens/gpu-model/{model}", "ResourceName": f"{model} GPUs", "ResourceType": "GPU",
            "SubAccountId": account, "SubAccountName": account,
            "Tags": json.dumps({"gpulens/tenant": tenant, "gpulens/state": cost_state, "gpulens/gpu-model": model}),
            "x_Tenant": tenant, "x_CostState": cost_state, "x_GpuModel": model, "x_GeHours": ge_hours,
            "x_UnroundedCost": cost, "x_MigProration": "slices", "x_UnallocatedPolicy": "own-line",
        })
    append_run_rows(con, "idle_capacity", idle)  # a view over day parts: the run's rows form one part
    _insert(con, "chargeback", charge)
    append_run_rows(con, "fragmentation", [{
        **run, "bucket_start": T0, "bucket_end": T0 + timedelta(hours=1), "node": "node-h200", "gpu_model": "H200",
        "free_gpus": 0, "free_mig_slices": 2, "free_ge": 2 / 7, "usable_ge": 0.0, "stranded_ge": 2 / 7,
        "stranded_ge_hours": 2 / 7, "largest_shape": "1g.18gb", "largest_shape_ge": 1 / 7,
        "pending_shapes": ["3g.71gb@H200"], "reason": "2 free slices, but only 3g.71gb is pending",
    }])
    _insert(con, "placement", [{
        **run, "tenant": "vision", "namespace": "vision-train", "workload_kind": "Job", "workload": "trainer",
        "gpu_model": "A100", "level": "numa", "pods": 1, "devices": 2, "nodes": 1, "domains_spanned": 2,
        "min_domains": 1, "excess_domains": 1, "placed_worse": True, "distance_score": 2.2, "ge_hours": 10.0,
        "ge_hours_affected": 10.0, "placements": 1, "domains": ["node-a100/numa-0", "node-a100/numa-1"],
        "first_seen": WINDOW[0], "last_seen": WINDOW[1],
        "reason": "2 numa domains where 1 could hold its 2 GPUs (1 pod(s)); node-a100/numa-0, node-a100/numa-1",
    }])
    _insert(con, "topology_stranded", [{
        **run, "measured_at": WINDOW[1], "level": "numa", "domain": "node-a100/numa-1", "parent": "node-a100",
        "gpu_model": "A100", "free_gpus": 1, "stranded_gpus": 1, "parent_free_gpus": 2, "smallest_shape_gpus": 2,
        "reason": "1 free GPU(s) here, too few for the smallest pod of 2 GPUs, while node-a100 has 2 free",
    }])
    _insert(con, "isolation_risk", [
        {**run, "scope": "device", "gpu_uuid": H200, "node": "node-h200", "tenant": None, "sharing_mode": "mig",
         "score": 45.0, "terms": json.dumps([
             {"term": "tenants_sharing_gpu", "points": 30.0, "reason": "3 tenants on one GPU"},
             {"term": "no_network_policy", "points": 15.0, "reason": f"namespace of {EVIL_TENANT} has none"}])},
        {**run, "scope": "device", "gpu_uuid": A100_0, "node": "node-a100", "tenant": None,
         "sharing_mode": "exclusive", "score": 0.0, "terms": "[]"},
        {**run, "scope": "tenant", "gpu_uuid": H200, "node": "node-h200", "tenant": EVIL_TENANT, "sharing_mode": "mig",
         "score": 45.0, "terms": json.dumps([
             {"term": "tenants_sharing_gpu", "points": 30.0, "reason": "shares GPU-h200-0"},
             {"term": "no_network_policy", "points": 15.0, "reason": "no NetworkPolicy"}])},
        {**run, "scope": "tenant", "gpu_uuid": H200, "node": "node-h200", "tenant": "vision", "sharing_mode": "mig",
         "score": 30.0, "terms": json.dumps([
             {"term": "tenants_sharing_gpu", "points": 30.0, "reason": "shares GPU-h200-0"}])},
    ])
    _insert(con, "health", [
        {**run, "scope": "gpu", "node": "node-a100", "gpu_uuid": A100_1, "state": "drain", "drain_candidate": True,
         "evidence": json.dumps([{"signal": "xid", "value": 79, "threshold": 1, "severity": "drain",
                                  "reason": "XID 79: GPU has fallen off the bus"}]),
         "first_evidence_ts": T0 + 30 * STEP, "last_evidence_ts": T0 + 30 * STEP},
        {**run, "scope": "node", "node": "node-a100", "gpu_uuid": None, "state": "drain", "drain_candidate": True,
         "evidence": json.dumps([{"signal": "gpu", "value": 1, "threshold": 1, "severity": "drain",
                                  "reason": f"{A100_1} must drain"}]),
         "first_evidence_ts": T0 + 30 * STEP, "last_evidence_ts": T0 + 30 * STEP},
        {**run, "scope": "gpu", "node": "node-h200", "gpu_uuid": H200, "state": "ok", "drain_candidate": False,
         "evidence": "[]"},
    ])
