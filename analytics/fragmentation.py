"""Fragmentation: free capacity per node and bucket, what pending demand could use, what is stranded.

Free units in a bucket: a whole GPU (any sharing mode) with no holder while it reported; a MIG
instance with no holder; a MIG GPU's unpartitioned slices; the free part of a whole GPU that
fractional holders or shared replicas hold in part (its GE less ``an_db.held_peak``, shape
``fraction``). A pending shape (``pending_demand`` in the bucket: ``gpu`` or a MIG profile, optionally
for one GPU model; a pending pod's ``fraction:<GE>:<memory bytes>`` from the pod inventory) can use a
free whole GPU if it is ``gpu`` or a fraction, a free MIG instance of exactly its profile,
unpartitioned slices where the MIG catalog says the profile still fits next to the existing instances
(a dynamic GPU-instance creation; placement offsets are not modelled), and a free part of a GPU if it
is a fraction no larger than it (memory included: that part of the GPU's memory) or ``gpu`` on a
time-sliced or MPS GPU with a free replica. Kueue's pending sum of a fraction resource (``fraction``,
no size) may fit any free whole GPU or part: it never makes capacity stranded. Free capacity is **stranded** only while demand is
pending and no pending shape can use it; with no demand it is idle, not stranded; where no source of
pending demand was collected at all, the reason says so instead of claiming there was none. Rows exist only
for nodes with free capacity in the bucket. Of shapes with equal GE, the largest shape is the last
profile name in sort order (so that reruns agree). Reasons are a few fixed sentences (the amounts
are in their own columns), so that outputs can add up the GE-hours each reason holds.
"""
from __future__ import annotations

import duckdb

from analytics.facts import Window
from analytics.idle import bucket_params

FRAGMENTATION_SELECT = """
WITH pending_pods AS (  -- pods waiting for part of a GPU (the inventory's share per GPU): no Kueue gauge has the shape
    SELECT CAST((epoch_us(p.ts) - $start_us) // $bs_us AS INTEGER) AS b,
           TRY_CAST(json_extract_string(p.gpu_requests, '$."gpulens.io/gpu-share"') AS DOUBLE) AS share,
           TRY_CAST(json_extract_string(p.gpu_requests, '$."gpulens.io/gpu-share-memory-bytes"') AS BIGINT) AS memory
    FROM f_pod_snapshots p
    WHERE p.ts >= $start AND p.ts < $end AND p.phase = 'Pending'
),
pending AS (
    SELECT DISTINCT CAST((epoch_us(p.ts) - $start_us) // $bs_us AS INTEGER) AS b,
           p.profile, coalesce(m.short, p.gpu_model, '') AS gpu_model, NULL::DOUBLE AS share, NULL::BIGINT AS memory
    FROM f_pending_demand p LEFT JOIN an_models m ON m.alias = p.gpu_model
    WHERE p.ts >= $start AND p.ts < $end AND p.quantity > 0
    UNION
    SELECT b, 'fraction:' || coalesce(CAST(round(share, 4) AS VARCHAR), '') || ':' || coalesce(CAST(memory AS VARCHAR), ''),
           '', round(share, 4), memory
    FROM pending_pods WHERE share > 0 OR memory > 0
),
pending_lists AS (
    SELECT b, list(DISTINCT profile || CASE WHEN gpu_model = '' THEN '' ELSE '@' || gpu_model END
                   ORDER BY profile || CASE WHEN gpu_model = '' THEN '' ELSE '@' || gpu_model END) AS shapes
    FROM pending GROUP BY b
),
gpus AS (SELECT gk, any_value(nk) AS nk, any_value(gpu_model) AS gpu_model FROM an_dev GROUP BY gk),
addable AS (SELECT g.gk, x.profile, x.ge FROM an_addable x JOIN (SELECT DISTINCT gk, gpu_uuid FROM an_dev) g USING (gpu_uuid)),
best_addable AS (SELECT gk, arg_max(profile, (ge, profile)) AS profile, max(ge) AS ge FROM addable GROUP BY gk),
units AS (
    SELECT db.b, d.nk, d.gpu_model, d.gk,
           CASE WHEN d.kind = 'mig' THEN d.profile ELSE 'gpu' END AS shape, d.kind, d.ge,
           CASE WHEN d.kind = 'mig' THEN coalesce(d.slices, round(d.ge * 7)) ELSE 0 END AS slices,
           d.memory_total_bytes AS memory, 1.0 AS replica
    FROM an_db db JOIN an_dev d USING (dk)
    WHERE db.known_h > 0 AND db.alloc_raw = 0
    UNION ALL
    SELECT gb.b, g.nk, g.gpu_model, gb.gk, 'unpartitioned', 'mig',
           1.0 - gb.ge_sum, round((1.0 - gb.ge_sum) * 7), NULL, 1.0
    FROM an_gpub gb JOIN gpus g USING (gk)
    WHERE gb.is_mig AND gb.ge_sum < 1.0 - 1e-9 AND gb.known_h > 0
    UNION ALL  -- the free part of a GPU that fractional holders or shared replicas hold in part
    SELECT db.b, d.nk, d.gpu_model, d.gk, 'fraction', 'share', d.ge - db.held_peak, 0,
           d.memory_total_bytes * (d.ge - db.held_peak) / d.ge,
           CASE WHEN d.sharing_mode IN ('time-slicing', 'mps') AND d.replicas > 1 THEN d.ge / d.replicas END
    FROM an_db db JOIN an_dev d USING (dk)
    WHERE db.known_h > 0 AND db.alloc_raw > 0 AND d.kind = 'gpu' AND db.held_peak < d.ge - 1e-9
),
fits_fraction AS (  -- (bucket, free unit) that a pending fraction fits: its share, and its memory where it states it
    SELECT DISTINCT u.b, u.gk, u.shape
    FROM units u JOIN pending p ON p.b = u.b AND p.profile LIKE 'fraction%'  -- Kueue's bare 'fraction': any size
    WHERE u.kind IN ('gpu', 'share') AND coalesce(p.share, 0) <= u.ge + 1e-9
      AND (p.memory IS NULL OR p.memory <= u.memory)
),
fits_replica AS (  -- (bucket, shared GPU) whose free replicas a pending whole-device request can take
    SELECT DISTINCT u.b, u.gk
    FROM units u JOIN pending p ON p.b = u.b AND p.profile = 'gpu' AND (p.gpu_model = '' OR p.gpu_model = u.gpu_model)
    WHERE u.kind = 'share' AND u.replica IS NOT NULL AND u.replica <= u.ge + 1e-9
),
fits_any_model AS (SELECT DISTINCT b, profile FROM pending WHERE gpu_model = ''),
fits_model AS (SELECT DISTINCT b, profile, gpu_model FROM pending WHERE gpu_model <> ''),
fits_unpartitioned AS (  -- (bucket, GPU) whose unpartitioned slices could host a pending profile
    SELECT DISTINCT p.b, x.gk
    FROM pending p JOIN addable x ON x.profile = p.profile
    JOIN gpus g USING (gk)
    WHERE p.gpu_model = '' OR p.gpu_model = g.gpu_model
),
judged AS (
    SELECT u.*,
           CASE WHEN u.shape = 'unpartitioned' THEN fu.gk IS NOT NULL
                WHEN u.kind = 'share' THEN ff.gk IS NOT NULL OR fr.gk IS NOT NULL
                ELSE fa.profile IS NOT NULL OR fm.profile IS NOT NULL OR ff.gk IS NOT NULL END AS usable,
           CASE WHEN u.shape = 'unpartitioned' THEN ba.profile ELSE u.shape END AS best_shape,
           CASE WHEN u.shape = 'unpartitioned' THEN coalesce(ba.ge, 0) ELSE u.ge END AS best_ge
    FROM units u
    LEFT JOIN best_addable ba ON ba.gk = u.gk
    LEFT JOIN fits_any_model fa ON fa.b = u.b AND fa.profile = u.shape
    LEFT JOIN fits_model fm ON fm.b = u.b AND fm.profile = u.shape AND fm.gpu_model = u.gpu_model
    LEFT JOIN fits_unpartitioned fu ON fu.b = u.b AND fu.gk = u.gk
    LEFT JOIN fits_fraction ff ON ff.b = u.b AND ff.gk = u.gk AND ff.shape = u.shape
    LEFT JOIN fits_replica fr ON fr.b = u.b AND fr.gk = u.gk AND u.kind = 'share'
),
per_node AS (
    SELECT b, nk,
           count(*) FILTER (WHERE kind = 'gpu') AS free_gpus,
           coalesce(sum(slices) FILTER (WHERE kind = 'mig'), 0) AS free_mig_slices,
           sum(ge) AS free_ge,
           coalesce(sum(ge) FILTER (WHERE usable), 0) AS usable_ge,
           coalesce(sum(ge) FILTER (WHERE NOT usable), 0) AS unusable_ge,
           arg_max(best_shape, (best_ge, best_shape)) FILTER (WHERE best_ge > 0) AS largest_shape,
           coalesce(max(best_ge), 0) AS largest_shape_ge
    FROM judged GROUP BY b, nk
)
SELECT $part_id,
       $start::TIMESTAMP + to_seconds(n.b * $bs), $start::TIMESTAMP + to_seconds((n.b + 1) * $bs),
       names.node, names.gpu_model, n.free_gpus, n.free_mig_slices, n.free_ge, n.usable_ge,
       CASE WHEN pl.shapes IS NULL THEN 0 ELSE n.unusable_ge END AS stranded_ge,
       CASE WHEN pl.shapes IS NULL THEN 0 ELSE n.unusable_ge * $bh END AS stranded_ge_hours,
       n.largest_shape, n.largest_shape_ge, pl.shapes,
       CASE WHEN pl.shapes IS NULL AND NOT $demand_collected
                 THEN 'pending demand not collected (no Kueue metrics or pod inventory): not called stranded'
            WHEN pl.shapes IS NULL THEN 'no pending demand: free capacity is idle, not stranded'
            WHEN n.unusable_ge < 1e-9 THEN 'every free unit fits a pending shape'
            ELSE 'free capacity that no pending shape fits, while demand was pending' END
FROM per_node n JOIN (SELECT nk, any_value(node) AS node, any_value(gpu_model) AS gpu_model FROM an_dev GROUP BY nk) names
    USING (nk)  -- nk numbers (node, model): one name row each
LEFT JOIN pending_lists pl USING (b)
"""


def demand_collected(con: duckdb.DuckDBPyConnection, window: Window) -> bool:
    """Whether any source of pending demand reached the store for the window (Kueue metrics, pending
    demand rows, the pod inventory): without one, "no pending demand" would state what was not measured."""
    row = con.execute(
        """
        SELECT EXISTS (SELECT 1 FROM f_pending_demand WHERE ts >= $start AND ts < $end)
            OR EXISTS (SELECT 1 FROM f_quota_snapshots WHERE object_kind = 'ClusterQueue' AND ts >= $start AND ts < $end)
            OR EXISTS (SELECT 1 FROM f_pod_snapshots WHERE ts >= $start AND ts < $end)
        """,
        {"start": window.start, "end": window.end},
    ).fetchone()
    return bool(row and row[0])


def insert_fragmentation(con: duckdb.DuckDBPyConnection, part_id: str, window: Window) -> None:
    """Write the ``fragmentation`` rows of one day part spanning ``window`` (the caller holds the transaction)."""
    con.execute(
        "INSERT INTO fragmentation_parts " + FRAGMENTATION_SELECT,
        {**bucket_params(window), "part_id": part_id, "bs": window.bucket_seconds, "bh": window.bucket_hours,
         "demand_collected": demand_collected(con, window)},
    )
