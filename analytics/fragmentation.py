"""Fragmentation: free capacity per node and bucket, what pending demand could use, what is stranded.

Free units in a bucket: a whole GPU (any sharing mode) with no holder while it reported; a MIG
instance with no holder; a MIG GPU's unpartitioned slices. A pending shape (``pending_demand`` in
the bucket: ``gpu`` or a MIG profile, optionally for one GPU model) can use a free whole GPU if it
is ``gpu``, a free MIG instance of exactly its profile, or unpartitioned slices where the MIG
catalog says the profile still fits next to the existing instances (a dynamic GPU-instance
creation; placement offsets are not modelled). Free capacity is **stranded** only while demand is
pending and no pending shape can use it; with no demand it is idle, not stranded. Rows exist only
for nodes with free capacity in the bucket.
"""

from __future__ import annotations

import duckdb

from analytics.facts import Window

FRAGMENTATION_SELECT = """
WITH pending AS (
    SELECT DISTINCT time_bucket(to_seconds($bs), p.ts, $start::TIMESTAMP) AS bucket_start,
           p.profile, coalesce(m.short, p.gpu_model, '') AS gpu_model
    FROM f_pending_demand p LEFT JOIN an_models m ON m.alias = p.gpu_model
    WHERE p.ts >= $start AND p.ts < $end AND p.quantity > 0
),
pending_lists AS (
    SELECT bucket_start, list(DISTINCT profile || CASE WHEN gpu_model = '' THEN '' ELSE '@' || gpu_model END
                             ORDER BY profile || CASE WHEN gpu_model = '' THEN '' ELSE '@' || gpu_model END)
                        AS shapes
    FROM pending GROUP BY bucket_start
),
best_addable AS (
    SELECT gpu_uuid, arg_max(profile, ge) AS profile, max(ge) AS ge FROM an_addable GROUP BY gpu_uuid
),
units AS (
    SELECT db.bucket_start, d.node, d.gpu_model, d.gpu_uuid,
           CASE WHEN d.kind = 'mig' THEN d.profile ELSE 'gpu' END AS shape, d.kind, d.ge,
           CASE WHEN d.kind = 'mig' THEN coalesce(d.slices, round(d.ge * 7)) ELSE 0 END AS slices
    FROM an_db db JOIN an_dev d USING (device_id)
    WHERE db.known_h > 0 AND db.alloc_raw = 0
    UNION ALL
    SELECT gb.bucket_start, d.node, d.gpu_model, gb.gpu_uuid, 'unpartitioned', 'mig',
           1.0 - gb.ge_sum, round((1.0 - gb.ge_sum) * 7)
    FROM an_gpub gb
    JOIN (SELECT gpu_uuid, any_value(node) AS node, any_value(gpu_model) AS gpu_model FROM an_dev GROUP BY ALL) d
      USING (gpu_uuid)
    WHERE gb.is_mig AND gb.ge_sum < 1.0 - 1e-9 AND gb.known_h > 0
),
fits_any_model AS (SELECT DISTINCT bucket_start, profile FROM pending WHERE gpu_model = ''),
fits_model AS (SELECT DISTINCT bucket_start, profile, gpu_model FROM pending WHERE gpu_model <> ''),
fits_unpartitioned AS (  -- (bucket, GPU) whose unpartitioned slices could host a pending profile
    SELECT DISTINCT p.bucket_start, x.gpu_uuid
    FROM pending p JOIN an_addable x ON x.profile = p.profile
    JOIN (SELECT gpu_uuid, any_value(gpu_model) AS gpu_model FROM an_dev GROUP BY ALL) g USING (gpu_uuid)
    WHERE p.gpu_model = '' OR p.gpu_model = g.gpu_model
),
judged AS (
    SELECT u.*,
           CASE WHEN u.shape = 'unpartitioned' THEN fu.gpu_uuid IS NOT NULL
                ELSE fa.profile IS NOT NULL OR fm.profile IS NOT NULL END AS usable,
           CASE WHEN u.shape = 'unpartitioned' THEN b.profile ELSE u.shape END AS best_shape,
           CASE WHEN u.shape = 'unpartitioned' THEN coalesce(b.ge, 0) ELSE u.ge END AS best_ge
    FROM units u
    LEFT JOIN best_addable b ON b.gpu_uuid = u.gpu_uuid
    LEFT JOIN fits_any_model fa ON fa.bucket_start = u.bucket_start AND fa.profile = u.shape
    LEFT JOIN fits_model fm ON fm.bucket_start = u.bucket_start AND fm.profile = u.shape AND fm.gpu_model = u.gpu_model
    LEFT JOIN fits_unpartitioned fu ON fu.bucket_start = u.bucket_start AND fu.gpu_uuid = u.gpu_uuid
),
per_node AS (
    SELECT bucket_start, node, gpu_model,
           count(*) FILTER (WHERE kind <> 'mig') AS free_gpus,
           coalesce(sum(slices) FILTER (WHERE kind = 'mig'), 0) AS free_mig_slices,
           sum(ge) AS free_ge,
           coalesce(sum(ge) FILTER (WHERE usable), 0) AS usable_ge,
           coalesce(sum(ge) FILTER (WHERE NOT usable), 0) AS unusable_ge,
           arg_max(best_shape, best_ge) FILTER (WHERE best_ge > 0) AS largest_shape,
           coalesce(max(best_ge), 0) AS largest_shape_ge
    FROM judged GROUP BY ALL
)
SELECT $run_id, $start::TIMESTAMP, $end::TIMESTAMP, n.bucket_start, n.bucket_start + to_seconds($bs),
       n.node, n.gpu_model, n.free_gpus, n.free_mig_slices, n.free_ge, n.usable_ge,
       CASE WHEN pl.shapes IS NULL THEN 0 ELSE n.unusable_ge END AS stranded_ge,
       CASE WHEN pl.shapes IS NULL THEN 0 ELSE n.unusable_ge * $bh END AS stranded_ge_hours,
       n.largest_shape, n.largest_shape_ge, pl.shapes,
       CASE WHEN pl.shapes IS NULL THEN 'no pending demand: free capacity is idle, not stranded'
            WHEN n.unusable_ge < 1e-9 THEN 'every free unit fits a pending shape'
            ELSE printf('%.3f GE free that no pending shape fits', n.unusable_ge) END
FROM per_node n LEFT JOIN pending_lists pl USING (bucket_start)
"""


def insert_fragmentation(con: duckdb.DuckDBPyConnection, run_id: str, window: Window) -> None:
    """Write this run's ``fragmentation`` rows (the caller holds the transaction)."""
    con.execute(
        "INSERT INTO fragmentation " + FRAGMENTATION_SELECT,
        {
            "run_id": run_id,
            "start": window.start,
            "end": window.end,
            "bs": window.bucket_seconds,
            "bh": window.bucket_hours,
        },
    )
