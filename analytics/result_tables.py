"""The analytics result tables: what ``gpulens analyze`` writes into the store, column by column.

Every result row carries ``run_id`` (a hash of the window and the parameters, so the same analysis
run twice replaces its rows instead of duplicating them) and the window (``window_start`` inclusive,
``window_end`` exclusive, UTC). ``analysis_runs`` holds the parameters of each run as JSON.
Shares of compute are GPU-equivalents (GE: 1 per whole GPU, g/7 per MIG instance); money is USD.
``docs/analytics.md`` explains how each number is decided.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import duckdb

from collector.schema_version import log, store_path


@dataclass(frozen=True)
class Column:
    """One column of a result table: name, DuckDB type and what it means."""

    name: str
    type: str
    doc: str


def _c(name: str, type_: str, doc: str) -> Column:
    return Column(name, type_, doc)


_RUN = [
    _c("run_id", "VARCHAR NOT NULL", "Hash of window and parameters; see analysis_runs."),
    _c("window_start", "TIMESTAMP NOT NULL", "Analysed window start (inclusive, UTC)."),
    _c("window_end", "TIMESTAMP NOT NULL", "Analysed window end (exclusive, UTC)."),
]

TABLES: dict[str, list[Column]] = {
    "analysis_runs": [
        _c("run_id", "VARCHAR PRIMARY KEY", "sha256 (16 hex) of window + parameters JSON."),
        _c("window_start", "TIMESTAMP NOT NULL", "Analysed window start (inclusive, UTC)."),
        _c("window_end", "TIMESTAMP NOT NULL", "Analysed window end (exclusive, UTC)."),
        _c("bucket_seconds", "INTEGER NOT NULL", "Length of one time bucket."),
        _c("sample_interval_seconds", "DOUBLE NOT NULL", "Time one sample stands for (inferred or set)."),
        _c("parameters", "JSON NOT NULL", "Every setting that produced the rows (thresholds, weights, prices)."),
        _c("fact_source", "VARCHAR NOT NULL", "'store' or the Parquet directory the facts were read from."),
        _c("summary", "JSON", "Headline numbers of the run (AnalysisSummary as JSON)."),
        _c("created_at", "TIMESTAMP NOT NULL", "When the run was written (UTC)."),
    ],
    "idle_capacity": [
        *_RUN,
        _c("bucket_start", "TIMESTAMP NOT NULL", "Start of the time bucket (inclusive)."),
        _c("bucket_end", "TIMESTAMP NOT NULL", "End of the time bucket (exclusive)."),
        _c("device_id", "VARCHAR NOT NULL", "GPU or MIG UUID; a MIG GPU's never-partitioned slices use the GPU UUID."),
        _c("gpu_uuid", "VARCHAR NOT NULL", "Physical GPU."),
        _c("node", "VARCHAR NOT NULL", "Kubernetes node."),
        _c("gpu_model", "VARCHAR", "Short model name (H100, H200, A100) as in the devices table."),
        _c("profile", "VARCHAR NOT NULL", "'gpu', a MIG profile such as '1g.18gb', or 'unpartitioned'."),
        _c("sharing_mode", "VARCHAR", "exclusive, mig, time-slicing or mps."),
        _c("tenant", "VARCHAR", "Holding tenant; NULL for unallocated and unknown rows."),
        _c(
            "state",
            "VARCHAR NOT NULL",
            "unallocated | allocated-idle | allocated-active | allocated-unmeasured (no activity reading) "
            "| unknown (no data, or a collection gap).",
        ),
        _c("ge_hours", "DOUBLE NOT NULL", "GPU-equivalent hours in this state within the bucket."),
        _c("cost_usd", "DOUBLE", "ge_hours priced at the model's price (MIG prorated as configured); NULL: the "
           "model is unpriced (no price in the book), never zero."),
        _c("samples", "BIGINT NOT NULL", "Samples behind the row (0 for derived unallocated/unknown rows)."),
        _c(
            "memory_byte_hours",
            "DOUBLE",
            "Device memory in use x hours during this state, split by GE share (memory held while idle "
            "on allocated-idle rows); NULL when not measured.",
        ),
        _c("memory_avg_bytes", "DOUBLE", "Average memory in use over the row's samples; NULL when not measured."),
    ],
    "fragmentation": [
        *_RUN,
        _c("bucket_start", "TIMESTAMP NOT NULL", "Start of the time bucket (inclusive)."),
        _c("bucket_end", "TIMESTAMP NOT NULL", "End of the time bucket (exclusive)."),
        _c("node", "VARCHAR NOT NULL", "Kubernetes node."),
        _c("gpu_model", "VARCHAR", "Short model name."),
        _c("free_gpus", "INTEGER NOT NULL", "Whole non-MIG GPUs with no holder during the bucket."),
        _c("free_mig_slices", "INTEGER NOT NULL", "Free compute slices on MIG GPUs (unheld instances + unpartitioned)."),
        _c("free_ge", "DOUBLE NOT NULL", "Free GPU-equivalents on the node."),
        _c("usable_ge", "DOUBLE NOT NULL", "Free GE that at least one pending request shape could use."),
        _c("stranded_ge", "DOUBLE NOT NULL", "Free GE no pending shape can use, while demand was pending."),
        _c("stranded_ge_hours", "DOUBLE NOT NULL", "stranded_ge x bucket hours."),
        _c("largest_shape", "VARCHAR", "Largest shape allocatable now ('gpu' or a MIG profile); NULL if none."),
        _c("largest_shape_ge", "DOUBLE NOT NULL", "GE of largest_shape (0 if none)."),
        _c("pending_shapes", "VARCHAR[]", "Pending request shapes (profile@model) seen in the bucket."),
        _c("reason", "VARCHAR NOT NULL", "Why free capacity is or is not stranded, in words."),
    ],
    "isolation_risk": [
        *_RUN,
        _c("scope", "VARCHAR NOT NULL", "'device' (one physical GPU) or 'tenant'."),
        _c("gpu_uuid", "VARCHAR", "Physical GPU (device rows; the worst GPU on tenant rows)."),
        _c("node", "VARCHAR", "Node of gpu_uuid."),
        _c("tenant", "VARCHAR", "Tenant (tenant rows only)."),
        _c("sharing_mode", "VARCHAR", "Sharing mode of gpu_uuid."),
        _c("score", "DOUBLE NOT NULL", "0..100, exactly the sum of points in terms."),
        _c("terms", "JSON NOT NULL", "List of {term, points, reason}; a 'cap' term brings the sum down to 100."),
    ],
    "health": [
        *_RUN,
        _c("scope", "VARCHAR NOT NULL", "'gpu' or 'node' (a node takes the worst state of its GPUs)."),
        _c("node", "VARCHAR NOT NULL", "Kubernetes node."),
        _c("gpu_uuid", "VARCHAR", "Physical GPU (NULL on node rows)."),
        _c("state", "VARCHAR NOT NULL", "ok | watch (an early-warning trend) | warn | drain."),
        _c(
            "drain_candidate",
            "BOOLEAN NOT NULL",
            "state = 'drain', or an early-warning trend is raised: keep new work off it (what `gpulens remediate` "
            "taints and what capacity planning subtracts).",
        ),
        _c("evidence", "JSON NOT NULL", "List of {signal, value, threshold, severity, reason} (+ since, detected on trends)."),
        _c("first_evidence_ts", "TIMESTAMP", "Earliest time of a warn/drain signal in the window."),
        _c("last_evidence_ts", "TIMESTAMP", "Latest time of a warn/drain signal in the window."),
        _c("trend_start_ts", "TIMESTAMP", "When the earliest raised early-warning trend started (its run-up's first hour)."),
        _c("warning_ts", "TIMESTAMP", "When the first early-warning trend was raised (end of that hour)."),
        _c("failure_ts", "TIMESTAMP", "First hard failure seen to begin in the window (drain-class XID; lost GPU or remap failure after a reading without it)."),
        _c("lead_seconds", "DOUBLE", "failure_ts - warning_ts where the warning came first; NULL otherwise."),
    ],
    "placement": [
        *_RUN,
        _c("tenant", "VARCHAR NOT NULL", "Tenant of the workload."),
        _c("namespace", "VARCHAR NOT NULL", "Namespace of the workload."),
        _c("workload_kind", "VARCHAR NOT NULL", "Top owner kind (JobSet, PyTorchJob, LeaderWorkerSet, ...)."),
        _c("workload", "VARCHAR NOT NULL", "Top owner name: all pods of one job are one workload."),
        _c("gpu_model", "VARCHAR NOT NULL", "Short model name(s) of its GPUs ('+'-joined when mixed)."),
        _c("level", "VARCHAR NOT NULL", "nvlink | numa | node | rack | block | zone (one row per measured level)."),
        _c("pods", "INTEGER NOT NULL", "Pods of the placement held longest."),
        _c("devices", "INTEGER NOT NULL", "Whole GPUs of that placement."),
        _c("nodes", "INTEGER NOT NULL", "Nodes of that placement."),
        _c("domains_spanned", "INTEGER NOT NULL", "Domains of this level holding its GPUs."),
        _c("min_domains", "INTEGER NOT NULL", "Fewest domains of this level whose size could hold them (fleet shapes)."),
        _c("excess_domains", "INTEGER NOT NULL", "domains_spanned - min_domains."),
        _c("placed_worse", "BOOLEAN NOT NULL", "excess_domains > 0: spread over more domains than needed."),
        _c("distance_score", "DOUBLE", "Farthest GPU pair's hops + mean pair hops / 10 (1 NVLink .. 7 none); lower is closer."),
        _c("ge_hours", "DOUBLE NOT NULL", "GE-hours the workload held on whole GPUs in the window (all its placements)."),
        _c("ge_hours_affected", "DOUBLE NOT NULL", "GE-hours of its placements that spanned more domains of this level than needed."),
        _c("placements", "INTEGER NOT NULL", "Distinct placements (pod -> GPU sets) seen in the window."),
        _c("domains", "VARCHAR[] NOT NULL", "The domains spanned (paths such as zone/block/rack)."),
        _c("first_seen", "TIMESTAMP NOT NULL", "First sample of the workload in the window."),
        _c("last_seen", "TIMESTAMP NOT NULL", "Last sample of the workload in the window."),
        _c("reason", "VARCHAR NOT NULL", "The comparison in words."),
    ],
    "topology_stranded": [
        *_RUN,
        _c("measured_at", "TIMESTAMP NOT NULL", "Newest GPU sample of the window: free GPUs are counted there."),
        _c("level", "VARCHAR NOT NULL", "nvlink | numa | node | rack | block."),
        _c("domain", "VARCHAR NOT NULL", "The domain with free GPUs."),
        _c("parent", "VARCHAR", "The enclosing domain whose free GPUs are compared (node, rack, block, zone)."),
        _c("gpu_model", "VARCHAR NOT NULL", "Short model name."),
        _c("free_gpus", "INTEGER NOT NULL", "Free whole exclusive GPUs in the domain."),
        _c("stranded_gpus", "INTEGER NOT NULL", "free_gpus when no common shape fits here but one fits the parent's free GPUs, else 0."),
        _c("parent_free_gpus", "INTEGER NOT NULL", "Free GPUs of the parent domain."),
        _c("smallest_shape_gpus", "INTEGER", "Smallest common shape (pod or job GPUs) that the parent's free GPUs could take."),
        _c("reason", "VARCHAR NOT NULL", "Why the free GPUs are or are not stranded, in words."),
    ],
    "chargeback": [
        *_RUN,
        _c("BillingAccountId", "VARCHAR NOT NULL", "FOCUS: the fleet ('gpulens')."),
        _c("BillingCurrency", "VARCHAR NOT NULL", "FOCUS: 'USD'."),
        _c("BillingPeriodStart", "TIMESTAMP NOT NULL", "FOCUS: = window_start."),
        _c("BillingPeriodEnd", "TIMESTAMP NOT NULL", "FOCUS: = window_end."),
        _c("ChargePeriodStart", "TIMESTAMP NOT NULL", "FOCUS: day start (inclusive), clipped to the window."),
        _c("ChargePeriodEnd", "TIMESTAMP NOT NULL", "FOCUS: day end (exclusive), clipped to the window."),
        _c("ChargeCategory", "VARCHAR NOT NULL", "FOCUS: 'Usage'."),
        _c("ChargeDescription", "VARCHAR NOT NULL", "FOCUS: what the line charges, in words."),
        _c("BilledCost", "DECIMAL(18,2) NOT NULL", "FOCUS: internal transfer price (cents; remainders reconciled)."),
        _c("EffectiveCost", "DECIMAL(18,2) NOT NULL", "FOCUS: = BilledCost (no prepaid amortization on-prem)."),
        _c("ListCost", "DECIMAL(18,2) NOT NULL", "FOCUS: PricingQuantity x list price per GE-hour."),
        _c("ContractedCost", "DECIMAL(18,2) NOT NULL", "FOCUS: PricingQuantity x contracted price (list if none)."),
        _c("PricingQuantity", "DOUBLE NOT NULL", "FOCUS: priced GPU-hours (GE-hours; MIG by slices or memory)."),
        _c("PricingUnit", "VARCHAR NOT NULL", "FOCUS: 'GPU-Hour'."),
        _c("ListUnitPrice", "DOUBLE NOT NULL", "FOCUS: list USD per GPU-hour of the model."),
        _c("ContractedUnitPrice", "DOUBLE NOT NULL", "FOCUS: contracted USD per GPU-hour (list if none)."),
        _c("ProviderName", "VARCHAR NOT NULL", "FOCUS: 'gpulens'."),
        _c("PublisherName", "VARCHAR NOT NULL", "FOCUS: 'gpulens'."),
        _c("InvoiceIssuerName", "VARCHAR NOT NULL", "FOCUS: 'gpulens'."),
        _c("ServiceName", "VARCHAR NOT NULL", "FOCUS: 'GPU compute'."),
        _c("ServiceCategory", "VARCHAR NOT NULL", "FOCUS: 'AI and Machine Learning'."),
        _c("ResourceId", "VARCHAR", "FOCUS: the GPU pool of the line, 'gpulens/gpu-model/<model>'."),
        _c("ResourceName", "VARCHAR", "FOCUS: e.g. 'H200 GPUs'."),
        _c("ResourceType", "VARCHAR", "FOCUS: 'GPU'."),
        _c("SubAccountId", "VARCHAR NOT NULL", "FOCUS: tenant, or '__unallocated__' / '__unknown__'."),
        _c("SubAccountName", "VARCHAR NOT NULL", "FOCUS: as SubAccountId."),
        _c("Tags", "JSON NOT NULL", "FOCUS: the tenant's namespace labels (those all its namespaces share; "
           "k8s/namespace when it has one) and {\"gpulens/tenant\", \"gpulens/state\", \"gpulens/gpu-model\"}."),
        _c("x_Tenant", "VARCHAR", "Tenant charged (NULL on unallocated/unknown lines)."),
        _c(
            "x_CostState",
            "VARCHAR NOT NULL",
            "active | idle | unmeasured | shared-unallocated | unallocated | unknown.",
        ),
        _c("x_GpuModel", "VARCHAR", "Short GPU model name."),
        _c("x_GeHours", "DOUBLE NOT NULL", "Compute GE-hours behind the line (g/7 for MIG, whatever the proration)."),
        _c("x_UnroundedCost", "DOUBLE NOT NULL", "Cost before rounding to cents."),
        _c("x_MigProration", "VARCHAR NOT NULL", "The MIG proration rule (analytics/cost_rules.py: 'slices', 'memory')."),
        _c("x_UnallocatedPolicy", "VARCHAR NOT NULL", "The unallocated cost rule (analytics/cost_rules.py: 'own-line', 'even', 'proportional')."),
        _c("x_Namespace", "VARCHAR", "Kubernetes namespace of a tenant's held line (NULL on shared-unallocated "
           "and the fleet's own lines)."),
        _c("x_WorkloadKind", "VARCHAR", "Owner kind of the workload (Job, Deployment, ...); NULL when not known."),
        _c("x_Workload", "VARCHAR", "Owner name of the workload; NULL when not known."),
        _c("x_CommittedCost", "DECIMAL(18,2)", "The part of EffectiveCost bought under a commitment (already paid, "
           "used or not), from the share the price book's FOCUS import found; NULL: not known."),
    ],
    "quota_plan": [
        *_RUN,
        _c("generated_at", "TIMESTAMP NOT NULL", "When `gpulens plan` decided the plan (UTC)."),
        _c("cluster_queue", "VARCHAR NOT NULL", "Kueue ClusterQueue."),
        _c("tenant", "VARCHAR", "Tenant of the queue (budgets are per tenant)."),
        _c("flavor", "VARCHAR NOT NULL", "ResourceFlavor."),
        _c("resource", "VARCHAR NOT NULL", "Resource, e.g. nvidia.com/gpu or nvidia.com/mig-1g.18gb."),
        _c("current_quota", "DOUBLE", "nominalQuota now (NULL: the queue has none)."),
        _c("planned_quota", "BIGINT NOT NULL", "What the next apply writes (one step at most; = current on conflict)."),
        _c("target_quota", "BIGINT NOT NULL", "Where the plan goes without the step limit."),
        _c("capacity", "BIGINT NOT NULL", "Units this flavor and resource can give to nominal quotas: after drains and the reserve."),
        _c("physical_capacity", "BIGINT NOT NULL", "Units on the flavor's nodes (or from --capacity / --add-capacity)."),
        _c("drained", "BIGINT NOT NULL", "Units on health's drain candidates, taken out of capacity."),
        _c("reserve", "BIGINT NOT NULL", "Units kept back for resilience (policy: n+1, a count or a share)."),
        _c("demand_p50", "DOUBLE NOT NULL", "P50 of in-use + pending over the window."),
        _c("demand_p95", "DOUBLE NOT NULL", "P95 of in-use + pending over the window."),
        _c("demand_ask", "BIGINT", "What `recommend` asks for the entry (NULL: not enough evidence)."),
        _c("pending_share", "DOUBLE NOT NULL", "Share of the window's buckets with pending demand."),
        _c("weight", "DOUBLE NOT NULL", "Business priority weight of the queue."),
        _c("lower_bound", "BIGINT NOT NULL", "Floor of the next apply (guarantee, no-cut holds, one step)."),
        _c("upper_bound", "BIGINT NOT NULL", "Ceiling of the next apply (demand, budget, one step)."),
        _c(
            "binding_constraint",
            "VARCHAR NOT NULL",
            "capacity | reserve | budget | step | demand | guarantee | pending | evidence | conflict.",
        ),
        _c("relax_gain", "BIGINT NOT NULL", "Units the queue would gain if the binding constraint were relaxed."),
        _c("explanation", "VARCHAR NOT NULL", "Why, in words."),
        _c("conflict", "VARCHAR", "The conflicting constraints of the flavor and resource, with amounts (NULL: none)."),
        _c("parameters", "JSON NOT NULL", "The policy the plan was made with."),
        _c("apply_outcome", "VARCHAR", "What `gpulens plan --apply` did to the queue: applied | unchanged | skipped | "
           "refused | failed | unknown (may have been applied); NULL: not applied (dry run, or not changed)."),
        _c("apply_message", "VARCHAR", "The reason of that outcome, as printed (NULL: not applied)."),
    ],
    "remediation_outcomes": [
        _c("run_id", "VARCHAR NOT NULL", "The health run the decisions were made from (see analysis_runs)."),
        _c("window_start", "TIMESTAMP NOT NULL", "That run's window start (inclusive, UTC)."),
        _c("window_end", "TIMESTAMP NOT NULL", "That run's window end (exclusive, UTC)."),
        _c("decided_at", "TIMESTAMP NOT NULL", "When `gpulens remediate` ran (UTC)."),
        _c("mode", "VARCHAR NOT NULL", "'dry-run' (files only) or 'apply' (the live cluster was read and written)."),
        _c("node", "VARCHAR NOT NULL", "The Node decided on."),
        _c("flavor", "VARCHAR NOT NULL", "Its flavor (pool, else GPU model): the guard rails count per flavor."),
        _c("action", "VARCHAR NOT NULL", "taint | keep | untaint | skip | refuse | hold (circuit breaker)."),
        _c("scope", "VARCHAR NOT NULL", "device (DRA DeviceTaintRule), node (Node taint) or none."),
        _c("reason", "VARCHAR NOT NULL", "Why that action, as printed (the guard rail that refused it, the state...)."),
        _c("evidence", "VARCHAR", "The health evidence behind it, worst first (NULL: none recorded)."),
        _c("outcome", "VARCHAR", "What --apply did: applied | unchanged | skipped | refused | held | failed | unknown "
           "(may have been applied); NULL: dry run."),
        _c("outcome_message", "VARCHAR", "The outcome's message, as printed (NULL: dry run)."),
        _c("parameters", "JSON NOT NULL", "The guard rails (RemediationPolicy) the decisions were made under."),
    ],
    "recommendations": [
        _c("run_id", "VARCHAR NOT NULL", "Hash of window and settings of the `gpulens recommend` run."),
        _c("generated_at", "TIMESTAMP NOT NULL", "When the run was made (UTC)."),
        _c("window_start", "TIMESTAMP NOT NULL", "Evidence window start (UTC)."),
        _c("window_end", "TIMESTAMP NOT NULL", "Evidence window end (UTC)."),
        _c("strategy", "VARCHAR NOT NULL", "Rightsizing strategy name."),
        _c("parameters", "JSON NOT NULL", "RecommendSettings as JSON."),
        _c("scope", "VARCHAR NOT NULL", "'workload', 'quota', 'mig_conversion' or 'topology' (Kueue TAS advice per queue)."),
        _c("tenant", "VARCHAR", "Tenant of the workload or quota object."),
        _c("target_kind", "VARCHAR NOT NULL", "Workload owner kind, or the quota object's kind as the store names it "
           "('ClusterQueue', 'ResourceQuota', 'Queue.scheduling.run.ai', 'Queue.scheduling.volcano.sh'; 'Tenant' without a queue)."),
        _c("target_namespace", "VARCHAR NOT NULL", "Namespace ('' for cluster-scoped objects)."),
        _c("target_name", "VARCHAR NOT NULL", "Workload or quota object name."),
        _c("flavor", "VARCHAR NOT NULL DEFAULT ''", "Kueue ResourceFlavor ('' where none)."),
        _c("resource", "VARCHAR NOT NULL DEFAULT ''", "Resource, e.g. nvidia.com/gpu ('' for workloads)."),
        _c("gpu_model", "VARCHAR", "Short GPU model name."),
        _c("current_profile", "VARCHAR", "'gpu' or the MIG profile held now."),
        _c("recommended_profile", "VARCHAR", "The profile recommended."),
        _c("current_value", "DOUBLE", "Quota units, devices per pod, or whole GPUs to convert."),
        _c("recommended_value", "DOUBLE", "The value recommended."),
        _c("next_value", "DOUBLE", "Quota: what the next apply writes (step-limited)."),
        _c("lower_bound", "DOUBLE", "Quota: the lowest value the evidence allows."),
        _c("upper_bound", "DOUBLE", "Quota: the highest value the evidence allows."),
        _c("action", "VARCHAR NOT NULL", "What to do (keep, downsize, raise, cut, hold, propose_mig, ...)."),
        _c("confidence", "DOUBLE", "0..1."),
        _c("confidence_label", "VARCHAR", "low | medium | high."),
        _c("history_days", "DOUBLE", "Days of evidence behind the row."),
        _c("sample_count", "BIGINT", "Samples behind the row."),
        _c("evidence", "JSON", "The figures the decision was made on."),
        _c("reasons", "VARCHAR[]", "Why, in words."),
    ],
}

PRIMARY_KEYS: dict[str, tuple[str, ...]] = {
    "recommendations": ("run_id", "scope", "target_kind", "target_namespace", "target_name", "flavor", "resource"),
}
"""Table-level primary keys (``analysis_runs`` declares its own on ``run_id``)."""

PART_KEY = _c("part_id", "VARCHAR NOT NULL", "The day part the row belongs to; see analysis_parts.")

DAY_PARTS: dict[str, str] = {"idle_capacity": "idle_capacity_parts", "fragmentation": "fragmentation_parts"}
"""Result tables whose rows are stored once per day part and shown per run by a view of the same name."""

PART_TABLES: dict[str, list[Column]] = {
    **{part: [PART_KEY, *[c for c in TABLES[view] if c not in _RUN]] for view, part in DAY_PARTS.items()},
    "analysis_parts": [
        _c("part_id", "VARCHAR PRIMARY KEY", "sha256 (16 hex) of the span, its facts' fingerprint and every parameter."),
        _c("part_start", "TIMESTAMP NOT NULL", "Span start: a UTC day, clipped to the window (inclusive)."),
        _c("part_end", "TIMESTAMP NOT NULL", "Span end (exclusive)."),
        _c("fingerprint", "VARCHAR NOT NULL", "What the span's facts and devices looked like when it was computed."),
        _c("created_at", "TIMESTAMP NOT NULL", "When the part was computed (UTC)."),
        _c("parameters", "VARCHAR", "JSON of the parameters the part was computed with (its version included)."),
    ],
    "analysis_part_arrivals": [
        _c("part_id", "VARCHAR PRIMARY KEY", "A part taken from a worker's store (--parts-from) whose idle_capacity and "
           "fragmentation rows are still being copied: not stored until they are (the row goes with their commit)."),
        _c("source", "VARCHAR NOT NULL", "The worker's store."),
    ],
    "analysis_run_parts": [
        *_RUN,
        _c("part_id", "VARCHAR NOT NULL", "A day part the run's window is made of."),
    ],
    "parquet_file_contents": [
        _c("path", "VARCHAR PRIMARY KEY", "A fact Parquet file a day part read."),
        _c("stat", "VARCHAR NOT NULL", "Its size, modification and change times (ns), device and inode when hashed: "
           "a file whose stat moved is hashed again (never a fingerprint of its own)."),
        _c("rows", "BIGINT NOT NULL", "Its rows (footer)."),
        _c("ts_min", "TIMESTAMP", "Its smallest ts (footer statistics); NULL: none."),
        _c("ts_max", "TIMESTAMP", "Its largest ts (footer statistics); NULL: none."),
        _c("sha256", "VARCHAR NOT NULL", "SHA-256 of its bytes."),
    ],
    "analysis_spacings": [
        _c("spacing_key", "VARCHAR PRIMARY KEY", "sha256 of the span, its facts' fingerprint and the bucket."),
        _c("spacing_seconds", "DOUBLE", "Median spacing of a device's consecutive samples in the span; NULL: none."),
    ],
    "part_devices": [
        PART_KEY,
        _c("device_id", "VARCHAR NOT NULL", "Device sampled in the span."),
        _c("samples", "BIGINT NOT NULL", "Its samples in the span."),
        _c("samples_with_activity", "BIGINT NOT NULL", "Those with a finite activity reading."),
    ],
    "part_tenancy": [
        PART_KEY,
        _c("device_id", "VARCHAR NOT NULL", "Device held in the span."),
        _c("tenant", "VARCHAR", "A tenant that held it."),
        _c("namespace", "VARCHAR", "From this namespace."),
    ],
    "part_lines": [
        PART_KEY,
        _c("day", "DATE NOT NULL", "UTC day."),
        _c("tenant", "VARCHAR", "Tenant (NULL: unallocated, unknown)."),
        _c("state", "VARCHAR NOT NULL", "idle_capacity state."),
        _c("model", "VARCHAR NOT NULL", "Short GPU model ('' when unknown)."),
        _c("ge_hours", "DOUBLE NOT NULL", "fsum of the part's ge_hours."),
        _c("cost_usd", "DOUBLE", "fsum of the part's cost_usd (NULL: unpriced model)."),
    ],
    "part_placement_pods": [
        PART_KEY,
        _c("namespace", "VARCHAR NOT NULL", "Namespace of the workload (see analytics/placement/seen.py)."),
        _c("kind", "VARCHAR NOT NULL", "Top owner kind."),
        _c("wname", "VARCHAR NOT NULL", "Top owner name."),
        _c("pod", "VARCHAR NOT NULL", "A pod of it that held whole GPUs exclusively in the part."),
        _c("gpu_lo", "VARCHAR NOT NULL", "Its smallest GPU UUID there."),
        _c("gpu_hi", "VARCHAR NOT NULL", "Its largest GPU UUID there."),
    ],
    "part_placement_times": [
        PART_KEY,
        _c("namespace", "VARCHAR NOT NULL", "Namespace of the workload."),
        _c("kind", "VARCHAR NOT NULL", "Top owner kind."),
        _c("wname", "VARCHAR NOT NULL", "Top owner name."),
        _c("ts", "TIMESTAMP NOT NULL", "A sample time it held whole GPUs in the part."),
        _c("tenant", "VARCHAR", "Tenant of the workload."),
        _c("sig", "HUGEINT NOT NULL", "Sum of the hashes of its distinct (pod, GPU) pairs in the part then."),
        _c("pairs", "BIGINT NOT NULL", "Those pairs."),
        _c("ge", "DOUBLE NOT NULL", "GE of its rows then."),
    ],
    "part_placement_runs": [
        PART_KEY,
        _c("namespace", "VARCHAR NOT NULL", "Namespace of the workload (see analytics/placement/seen.py)."),
        _c("kind", "VARCHAR NOT NULL", "Top owner kind."),
        _c("wname", "VARCHAR NOT NULL", "Top owner name."),
        _c("pod", "VARCHAR NOT NULL", "The pod of the pair."),
        _c("gpu_uuid", "VARCHAR NOT NULL", "The GPU of the pair, held whole and exclusively."),
        _c("from_ts", "TIMESTAMP NOT NULL", "First sample time of the run in the span."),
        _c("to_ts", "TIMESTAMP NOT NULL", "Last sample time of the run in the span."),
        _c("step_us", "BIGINT NOT NULL", "Microseconds between its sample times (0: one sample)."),
    ],
    "part_health": [
        PART_KEY,
        _c("gpu_uuid", "VARCHAR NOT NULL", "Physical GPU with samples in the span."),
        _c("ecc_min", "BIGINT", "Smallest uncorrected ECC total."),
        _c("ecc_max", "BIGINT", "Largest uncorrected ECC total."),
        _c("retired_max", "BIGINT", "Largest retired-pages total."),
        _c("remap_failed", "BOOLEAN", "A row-remap failure was reported."),
        _c("remap_ts", "TIMESTAMP", "First time it was."),
        _c("lost", "BOOLEAN", "The GPU reported up = false."),
        _c("lost_first", "TIMESTAMP", "First time it did."),
        _c("lost_last", "TIMESTAMP", "Last time it did."),
        _c("thermal_min", "DOUBLE", "Smallest thermal-violation seconds total."),
        _c("thermal_max", "DOUBLE", "Largest thermal-violation seconds total."),
        _c("crc_min", "BIGINT", "Smallest NVLink CRC error total."),
        _c("crc_max", "BIGINT", "Largest NVLink CRC error total."),
        _c("first_ts", "TIMESTAMP NOT NULL", "First sample."),
        _c("last_ts", "TIMESTAMP NOT NULL", "Last sample."),
        _c("crc_rate", "DOUBLE", "Highest NVLink CRC error rate over 5 minutes (errors/s); NULL when the counter did not move."),
        _c("remap_onset", "TIMESTAMP", "First failed row-remap reading after one that was not (a failure that began in the span)."),
        _c("remap_at_first", "BOOLEAN", "The span's first row-remap reading was failed (NULL: none read)."),
        _c("remap_at_last", "BOOLEAN", "The span's last row-remap reading was failed (NULL: none read)."),
        _c("lost_onset", "TIMESTAMP", "First up = false after an up = true (lost in the span)."),
        _c("lost_at_first", "BOOLEAN", "The span's first up reading was false (NULL: none read)."),
        _c("lost_at_last", "BOOLEAN", "The span's last up reading was false (NULL: none read)."),
    ],
    "part_gpu_last": [
        PART_KEY,
        _c("gpu_uuid", "VARCHAR NOT NULL", "Physical GPU with samples in the span."),
        _c("ts", "TIMESTAMP NOT NULL", "Its last sample in the span."),
        _c("up", "BOOLEAN NOT NULL", "Up at that sample (a sample without an up reading counts as up)."),
        _c("held", "BOOLEAN NOT NULL", "An allocation claim held it at that very sample."),
    ],
    "part_trend_buckets": [
        PART_KEY,
        _c("gpu_uuid", "VARCHAR NOT NULL", "Physical GPU with samples (up) in the bucket whose buckets of the span are not all quiet (see part_trend_quiet)."),
        _c("bucket_start", "TIMESTAMP NOT NULL", "Start of the finest early-warning bucket (aligned to the epoch; 15 min by default)."),
        _c("last_ts", "TIMESTAMP NOT NULL", "Last sample of the GPU in the bucket (rates run from one bucket's last sample to the next)."),
        _c("ecc_corrected_max", "BIGINT", "Largest correctable ECC total (NULL: not measured)."),
        _c("pcie_replay_max", "BIGINT", "Largest PCIe replay total."),
        _c("nvlink_crc_max", "BIGINT", "Largest NVLink CRC error total."),
        _c("thermal_max", "DOUBLE", "Largest thermal-violation seconds total."),
        _c("clock_samples", "BIGINT NOT NULL", "Samples with both an SM clock and a power reading."),
        _c("clock_drop_samples", "BIGINT", "Of those, samples below clock_drop_ratio of the day's 95th-percentile clock while drawing at least clock_drop_power_ratio of the day's 95th-percentile power (NULL: none measured)."),
    ],
    "part_trend_quiet": [
        PART_KEY,
        _c("gpu_uuid", "VARCHAR NOT NULL", "Physical GPU whose early-warning buckets of the span are all quiet: stored as this one row, not in part_trend_buckets."),
        _c("first_bucket", "TIMESTAMP NOT NULL", "Start of its first bucket; it has a bucket at every finest step from here to last_bucket."),
        _c("last_bucket", "TIMESTAMP NOT NULL", "Start of its last bucket."),
        _c("first_last_ts", "TIMESTAMP NOT NULL", "Last sample in the first bucket."),
        _c("last_ts", "TIMESTAMP NOT NULL", "Last sample in the last bucket (a quiet bucket in between reads as its start)."),
        _c("ecc_corrected_max", "BIGINT", "The correctable ECC total of every bucket (NULL: not measured in any)."),
        _c("pcie_replay_max", "BIGINT", "The PCIe replay total of every bucket."),
        _c("nvlink_crc_max", "BIGINT", "The NVLink CRC error total of every bucket."),
        _c("thermal_max", "DOUBLE", "The thermal-violation seconds total of every bucket."),
        _c("clock_samples", "BIGINT NOT NULL", "Samples with an SM clock and a power reading, over all its buckets."),
        _c("clock_drop_samples", "BIGINT", "0: every bucket has clock readings and none dropped; NULL: drops measured in none of its buckets."),
    ],
    "part_trend_gpus": [
        PART_KEY,
        _c("gpu_uuid", "VARCHAR NOT NULL", "Physical GPU with early-warning buckets in the span."),
        _c("ecc_corrected_lo", "BIGINT", "Smallest of its buckets' ecc_corrected_max (NULL: not measured)."),
        _c("ecc_corrected_hi", "BIGINT", "Largest of them."),
        _c("pcie_replay_lo", "BIGINT", "Smallest of its buckets' pcie_replay_max."),
        _c("pcie_replay_hi", "BIGINT", "Largest of them."),
        _c("nvlink_crc_lo", "BIGINT", "Smallest of its buckets' nvlink_crc_max."),
        _c("nvlink_crc_hi", "BIGINT", "Largest of them."),
        _c("thermal_lo", "DOUBLE", "Smallest of its buckets' thermal_max."),
        _c("thermal_hi", "DOUBLE", "Largest of them."),
        _c("clock_drop_samples", "BIGINT", "Largest of its buckets' clock_drop_samples."),
    ],
    "part_workloads": [
        PART_KEY,
        _c("day", "DATE NOT NULL", "UTC day."),
        _c("tenant", "VARCHAR NOT NULL", "Tenant that held."),
        _c("model", "VARCHAR NOT NULL", "Short GPU model ('' when unknown)."),
        _c("namespace", "VARCHAR NOT NULL", "Namespace of the holder."),
        _c("workload_kind", "VARCHAR NOT NULL", "Top owner kind ('' when not known)."),
        _c("workload", "VARCHAR NOT NULL", "Top owner name ('' when not known)."),
        _c("state", "VARCHAR NOT NULL", "Class of the device sample at each held time: idle, active, unmeasured."),
        _c("ge_samples", "DOUBLE NOT NULL", "GE x samples held in that class."),
    ],
    "part_fleet": [
        PART_KEY,
        _c("day", "DATE NOT NULL", "UTC day."),
        _c("list_price", "DOUBLE NOT NULL", "List USD per GPU-hour."),
        _c("contracted_price", "DOUBLE NOT NULL", "Contracted USD per GPU-hour."),
        _c("gpu_buckets", "BIGINT NOT NULL", "GPUs present x buckets at that price."),
    ],
}
"""Day parts (``analytics/day_parts.py``): computed once per UTC day of facts and parameters, shared by runs."""

PART_SUMS = ("part_devices", "part_tenancy", "part_lines", "part_workloads", "part_fleet", "part_placement_pods",
             "part_placement_times", "part_placement_runs", "part_health", "part_gpu_last", "part_trend_buckets", "part_trend_quiet",
             "part_trend_gpus")
"""What a day part stores for the window-level stages, beside its result rows."""

PART_ROWS = ("analysis_parts", "analysis_part_arrivals", *DAY_PARTS.values(), *PART_SUMS)
"""Every table holding a day part's rows by its ``part_id`` (not the runs that list it): what dropping a part
or computing it again deletes."""

RESULT_TABLES = (
    "idle_capacity", "fragmentation", "isolation_risk", "health", "chargeback", "placement", "topology_stranded",
)
"""Tables ``gpulens analyze`` fills per run (``analysis_runs`` holds one row per run); ``quota_plan`` is
written by ``gpulens plan``, ``recommendations`` by ``gpulens recommend``."""


def ddl(table: str) -> str:
    """``CREATE TABLE IF NOT EXISTS`` statement of one result table."""
    cols = [f'"{c.name}" {c.type}' for c in TABLES[table]]
    if table in PRIMARY_KEYS:
        cols.append(f"PRIMARY KEY ({', '.join(PRIMARY_KEYS[table])})")
    body = ",\n    ".join(cols)
    return f"CREATE TABLE IF NOT EXISTS {table} (\n    {body}\n)"


RETIRED_PART_TABLES = ("part_placements", "part_placement_pairs")
"""Part sums of earlier releases (every placement with its pairs): their parts are computed again (the part
version changed), so the tables are dropped."""


def create_result_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create ``analysis_runs``, the day-part tables and every result table or view that does not exist
    yet (idempotent); a store whose ``idle_capacity`` or ``fragmentation`` is still a table keeps its
    runs: their rows become one part per run. Part tables of earlier releases are dropped."""
    for table in RETIRED_PART_TABLES:
        con.execute(f"DROP TABLE IF EXISTS {table}")  # noqa: S608 - constant names
    for table, cols in PART_TABLES.items():
        body = ",\n    ".join(f'"{c.name}" {c.type}' for c in cols)
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} (\n    {body}\n)")
    _add_new_columns(con, PART_TABLES)
    _relax_not_null(con, PART_TABLES)
    for table in TABLES:
        if table in DAY_PARTS:
            _create_part_view(con, table)
        else:
            con.execute(ddl(table))
    _add_new_columns(con, {t: cols for t, cols in TABLES.items() if t not in DAY_PARTS})


def ensure_table(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """Create one (non day-part) result table, or give an older one the columns added since."""
    con.execute(ddl(table))
    _add_new_columns(con, {table: TABLES[table]})


def _add_new_columns(con: duckdb.DuckDBPyConnection, tables: Mapping[str, list[Column]]) -> None:
    """A table from an older release gets the columns added since (appended, NULL in its earlier rows)."""
    have: dict[str, set[str]] = defaultdict(set)
    for table, column in con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND list_contains($tables, table_name)",
        {"tables": list(tables)},
    ).fetchall():
        have[table].add(column)
    for table, cols in tables.items():
        for c in cols:
            if c.name not in have[table]:
                con.execute(f'ALTER TABLE {table} ADD COLUMN "{c.name}" {c.type.replace(" NOT NULL", "")}')
                log.warning("the store %s was upgraded: %s gets the column %s (NULL in the rows stored before)",
                            store_path(con), table, c.name)


def _relax_not_null(con: duckdb.DuckDBPyConnection, tables: Mapping[str, list[Column]]) -> None:
    """A column an older release declared NOT NULL that may now be NULL (an unpriced model's money) loses it."""
    strict = {
        (str(t), str(c)) for t, c in con.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND is_nullable = 'NO' AND list_contains($tables, table_name)", {"tables": list(tables)},
        ).fetchall()
    }
    for table, cols in tables.items():
        for c in cols:
            if (table, c.name) in strict and "NOT NULL" not in c.type and "PRIMARY KEY" not in c.type:
                con.execute(f'ALTER TABLE {table} ALTER COLUMN "{c.name}" DROP NOT NULL')


def _create_part_view(con: duckdb.DuckDBPyConnection, view: str) -> None:
    part = DAY_PARTS[view]
    kind = con.execute(
        "SELECT table_type FROM information_schema.tables WHERE table_schema = 'main' AND table_name = ?", [view]
    ).fetchone()
    if kind is not None and kind[0] == "VIEW":
        return
    if kind is not None:  # rows of an older store: one part per run, kept
        con.execute(
            f"""INSERT INTO analysis_run_parts SELECT DISTINCT run_id, window_start, window_end, 'run:' || run_id
                FROM {view} ANTI JOIN analysis_run_parts r USING (run_id)"""  # noqa: S608 - constant names
        )
        con.execute(
            f"INSERT INTO {part} SELECT 'run:' || run_id, * EXCLUDE (run_id, window_start, window_end) FROM {view}"  # noqa: S608
        )
        con.execute(f"DROP TABLE {view}")
    columns = ", ".join(f'p."{c.name}"' for c in TABLES[view] if c not in _RUN)
    con.execute(
        f"""CREATE VIEW {view} AS
            SELECT r.run_id, r.window_start, r.window_end, {columns}
            FROM analysis_run_parts r JOIN {part} p USING (part_id)"""  # noqa: S608 - constant names
    )


def append_run_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, object]]) -> None:
    """Append whole-run rows (each with ``run_id`` and the window) to a result table or a day-part view:
    there, each run's rows form one part, ``run:<run_id>`` (how rows made outside ``analyze`` get in)."""
    if not rows:
        return
    if table not in DAY_PARTS:
        names = column_names(table)
        append_columns(con, table, {n: [r.get(n) for r in rows] for n in names})
        return
    runs = {(r["run_id"], r["window_start"], r["window_end"]) for r in rows}
    for run_id, start, end in sorted(runs, key=str):
        con.execute(
            """INSERT INTO analysis_run_parts SELECT $run, $start, $end, 'run:' || $run
               WHERE NOT EXISTS (SELECT 1 FROM analysis_run_parts WHERE run_id = $run AND part_id = 'run:' || $run)""",
            {"run": run_id, "start": start, "end": end},
        )
    names = [c.name for c in PART_TABLES[DAY_PARTS[table]]]
    cols = {n: [r.get(n) for r in rows] for n in names[1:]}
    insert_columns(con, DAY_PARTS[table], {"part_id": [f"run:{r['run_id']}" for r in rows], **cols})


def delete_run(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """Remove one run's rows from every result table (its day parts stay for other runs to share)."""
    for table in (*RESULT_TABLES, "analysis_runs"):
        if table not in DAY_PARTS:
            con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])  # noqa: S608 - constant names
    con.execute("DELETE FROM analysis_run_parts WHERE run_id = ?", [run_id])
    for part in DAY_PARTS.values():  # rows that came in as a whole run (an older store, a fixture)
        con.execute(f"DELETE FROM {part} WHERE part_id = 'run:' || ?", [run_id])  # noqa: S608 - constant names


def drop_unused_parts(con: duckdb.DuckDBPyConnection) -> None:
    """Delete the day parts that no run refers to any more (after a run replaced its own earlier rows)."""
    unused = [
        r[0]
        for r in con.execute(
            "SELECT part_id FROM analysis_parts ANTI JOIN analysis_run_parts USING (part_id)"
        ).fetchall()
    ]
    if not unused:
        return
    for table in PART_ROWS:
        con.execute(f"DELETE FROM {table} WHERE list_contains($ids, part_id)", {"ids": unused})  # noqa: S608


def append_columns(con: duckdb.DuckDBPyConnection, table: str, cols: dict[str, list[object]]) -> None:
    """Append rows given column-wise (names as in ``TABLES[table]``, in order) to a result table."""
    if not cols or not next(iter(cols.values())):
        return
    if list(cols) != column_names(table):
        raise ValueError(f"columns of {table} must be {column_names(table)}")
    insert_columns(con, table, cols)


def insert_columns(con: duckdb.DuckDBPyConnection, table: str, cols: Mapping[str, Sequence[object]]) -> None:
    """``INSERT INTO table (names) SELECT ...`` rows given column-wise (every list as long; ``table`` and
    the names are our constants): the lists become NumPy object arrays that DuckDB scans (every value
    looked at for the column's type), cast to the table's types. Neither Arrow nor polars is imported
    (0.1-0.2 s of every ``analyze`` process); binding the lists as parameters (``unnest``) is 3x slower
    for a fleet's rows. A column of one value (the run's id, its window) is bound once as a parameter;
    Decimals go in as their exact text (DuckDB reads a Decimal object 10x slower). A float NaN is stored
    as NULL, as DuckDB's scan reads it: not a number is not a measurement."""
    import numpy as np

    n = len(next(iter(cols.values()), ()))
    constants: dict[str, object] = {}
    arrays: dict[str, object] = {}
    for name, values in cols.items():
        listed = list(values)
        if n > 1 and listed.count(listed[0]) == n:
            first = listed[0]
            constants[name] = None if isinstance(first, float) and first != first else first
        else:
            arrays[name] = _column_array(np, listed, n)
    names = ", ".join(f'"{c}"' for c in cols)
    params = {f"c{i}": constants[c] for i, c in enumerate(cols) if c in constants}
    select = ", ".join(f'$c{i} AS "{c}"' if c in constants else f'"{c}"' for i, c in enumerate(cols))
    if not arrays:
        con.execute(f"INSERT INTO {table} ({names}) SELECT {select} FROM range({n})", params)  # noqa: S608
        return
    view = f"an_insert_{table}"
    sample = con.execute("SELECT current_setting('pandas_analyze_sample')").fetchone()
    con.execute(f"SET pandas_analyze_sample = {max(n, 1)}")
    con.register(view, arrays)
    try:
        con.execute(f"INSERT INTO {table} ({names}) SELECT {select} FROM {view}", params)  # noqa: S608
    finally:
        con.unregister(view)
        if sample is not None:
            con.execute(f"SET pandas_analyze_sample = {int(sample[0])}")


def _column_array(np: Any, values: list[object], n: int) -> Any:
    """One column for DuckDB's scan: an object array (None is NULL), or the exact text of finite Decimals
    (cast back to the column's DECIMAL by the insert)."""
    if n and isinstance(values[0], Decimal) and all(v is None or (isinstance(v, Decimal) and v.is_finite())
                                                     for v in values):
        return np.fromiter((None if v is None else format(v, "f") for v in values), dtype=object, count=n)
    return np.fromiter(values, dtype=object, count=n)


def column_names(table: str) -> list[str]:
    """Column names of a result table, in order."""
    return [c.name for c in TABLES[table]]


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[Mapping[str, object]]) -> int:
    """Insert ``rows`` (each a mapping of every column name of ``table`` to its value) in one statement.

    Values are bound as parameters (one list per column), never formatted into the SQL; a row naming a
    column the table lacks, or lacking one it has, raises ``ValueError``.
    """
    names = column_names(table)
    for row in rows:
        if set(row) != set(names):
            extra, missing = sorted(set(row) - set(names)), sorted(set(names) - set(row))
            raise ValueError(f"a row of {table}: unknown columns {extra}, missing columns {missing}")
    if not rows:
        return 0
    columns = ", ".join(f'"{n}"' for n in names)
    values = ", ".join("unnest(?)" for _ in names)
    con.execute(f"INSERT INTO {table} ({columns}) SELECT {values}",  # noqa: S608 - names from TABLES
                [[row[n] for row in rows] for n in names])
    return len(rows)
