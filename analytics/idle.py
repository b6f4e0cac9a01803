"""Idle capacity: per device, tenant and time bucket, the GE-hours and money in each state.

Each sample (device sample or allocation row) stands for one sample interval. Per device and bucket,
the holders' GE-hours (from ``allocations``) go into ``allocated-active`` when the bucket's mean
activity is at or above the threshold, ``allocated-idle`` below it, ``allocated-unmeasured`` when the
device gives no activity reading (e.g. A100 MIG); the rest of the measured time is ``unallocated``.
Bucket time without device samples, or inside a collection gap, is ``unknown``; holders can never
exceed the measured capacity. A MIG GPU's slices that no GPU instance covers are an
``unpartitioned`` pseudo-device (``device_id`` = GPU UUID), unallocated whenever the GPU reports.
Per GPU and bucket, costs add up to exactly price x bucket hours.
"""

from __future__ import annotations

import duckdb

from analytics.facts import Window

_GAP_FILTER = """
    AND NOT EXISTS (
        SELECT 1 FROM an_gaps g
        WHERE s.ts >= g.gap_start AND s.ts < g.gap_end
          AND (g.target = '' OR g.target = s.node OR g.target = s.gpu_uuid OR g.target = s.device_id)
    )
"""


def prepare_samples(con: duckdb.DuckDBPyConnection, window: Window) -> None:
    """Per device and bucket: samples and their mean activity (``an_known``), holder shares (``an_alloc``)."""
    params = {"start": window.start, "end": window.end, "bs": window.bucket_seconds}
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE an_gaps AS
        SELECT coalesce(target, '') AS target, gap_start, gap_end FROM f_gaps
        WHERE gap_end > $start AND gap_start < $end
        """,
        {"start": window.start, "end": window.end},
    )
    row = con.execute("SELECT count(*) FROM an_gaps").fetchone()
    gap_filter = _GAP_FILTER if row is not None and row[0] else ""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE an_known AS
        SELECT s.device_id, time_bucket(to_seconds($bs), s.ts, $start::TIMESTAMP) AS bucket_start,
               count(*) AS n, min(s.ts) AS first_ts, max(s.ts) AS last_ts,
               count(s.activity_ratio) AS n_activity, avg(s.activity_ratio) AS activity_avg,
               avg(s.memory_used_bytes) AS memory_avg
        FROM f_device_samples s
        WHERE s.ts >= $start AND s.ts < $end {gap_filter}
        GROUP BY ALL
        """,  # noqa: S608 - gap_filter is a constant fragment; values are bound
        params,
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE an_alloc AS
        SELECT s.device_id, time_bucket(to_seconds($bs), s.ts, $start::TIMESTAMP) AS bucket_start,
               s.tenant, s.namespace, sum(s.gpu_equivalents) AS ge_samples, count(*) AS samples
        FROM f_allocations s
        WHERE s.ts >= $start AND s.ts < $end {gap_filter}
        GROUP BY ALL
        """,  # noqa: S608 - gap_filter is a constant fragment; values are bound
        params,
    )


def build_device_buckets(con: duckdb.DuckDBPyConnection, window: Window, interval_s: float) -> None:
    """``an_db``: per device and bucket, known hours, allocated GE-hours and the scale factors."""
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE an_db AS
        WITH seen AS (
            SELECT device_id, min(bucket_start) AS first_b, max(bucket_start) AS last_b FROM an_known GROUP BY ALL
        ),
        life AS (  -- the device's listed lifetime, stretched to every bucket it has samples in
            SELECT d.device_id,
                   time_bucket(to_seconds($bs), greatest(least(coalesce(d.first_seen, $start), coalesce(s.first_b, $end)),
                                                         $start), $start::TIMESTAMP) AS lo,
                   least(greatest(coalesce(d.last_seen, $end), coalesce(s.last_b, $start)),
                         $end - to_seconds($bs)) AS hi
            FROM an_dev d LEFT JOIN seen s USING (device_id)
        ),
        grid AS (
            SELECT device_id, unnest(generate_series(lo, hi, to_seconds($bs))) AS bucket_start
            FROM life WHERE lo <= hi
        ),
        alloc AS (
            SELECT device_id, bucket_start, sum(ge_samples) AS ge_samples FROM an_alloc GROUP BY ALL
        ),
        base AS (
            SELECT g.device_id, g.bucket_start, d.gpu_uuid, d.ge, d.cost_share, d.kind,
                   coalesce(k.n, 0) AS n, coalesce(k.n_activity, 0) AS n_activity,
                   k.activity_avg, k.memory_avg,
                   least(coalesce(k.n, 0) * $w, $bh) AS known_h,
                   CASE WHEN coalesce(k.n, 0) * $w > $bh THEN $bh / (k.n * $w) ELSE 1.0 END AS sample_scale,
                   coalesce(a.ge_samples, 0) * $w AS alloc_raw
            FROM grid g
            JOIN an_dev d USING (device_id)
            LEFT JOIN an_known k USING (device_id, bucket_start)
            LEFT JOIN alloc a USING (device_id, bucket_start)
        )
        SELECT *,
               CASE WHEN alloc_raw * sample_scale > ge * known_h AND alloc_raw > 0
                    THEN ge * known_h / (alloc_raw * sample_scale) ELSE 1.0 END AS alloc_scale
        FROM base
        """,
        {
            "w": interval_s / 3600.0,
            "bh": window.bucket_hours,
            "bs": window.bucket_seconds,
            "start": window.start,
            "end": window.end,
        },
    )
    # Per MIG (or multi-device) GPU and bucket: shares present, the unpartitioned remainder, cost factor.
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE an_gpub AS
        SELECT gpu_uuid, bucket_start,
               sum(cost_share) AS share_sum, sum(ge) AS ge_sum, max(known_h) AS known_h,
               bool_or(kind = 'mig') AS is_mig,
               1.0 / greatest(1.0, sum(cost_share)) AS cost_factor
        FROM an_db
        SEMI JOIN (SELECT gpu_uuid FROM an_dev GROUP BY gpu_uuid HAVING count(*) > 1 OR bool_or(kind = 'mig')) m
             USING (gpu_uuid)
        GROUP BY ALL
        """
    )


IDLE_SELECT = """
WITH dev AS (SELECT * FROM an_dev),
db AS (
    SELECT db.*, coalesce(gb.cost_factor, 1.0) AS cost_factor FROM an_db db
    LEFT JOIN an_gpub gb USING (gpu_uuid, bucket_start)
),
allocated AS (
    SELECT a.device_id, a.bucket_start, a.tenant,
           CASE WHEN db.activity_avg IS NULL THEN 'allocated-unmeasured'
                WHEN db.activity_avg < $thr THEN 'allocated-idle'
                ELSE 'allocated-active' END AS state,
           sum(a.ge_samples) * $w * db.sample_scale * db.alloc_scale AS ge_hours,
           sum(a.samples) AS samples,
           sum(a.ge_samples) * $w * db.sample_scale * db.alloc_scale / db.ge * db.memory_avg AS memory_byte_hours,
           any_value(db.memory_avg) AS memory_avg_bytes,
           any_value(db.cost_factor) AS cost_factor
    FROM an_alloc a JOIN db USING (device_id, bucket_start)
    GROUP BY a.device_id, a.bucket_start, a.tenant, db.activity_avg, db.sample_scale, db.alloc_scale, db.ge,
             db.memory_avg
),
free AS (
    SELECT device_id, bucket_start, NULL::VARCHAR AS tenant, 'unallocated' AS state,
           ge * known_h - alloc_raw * sample_scale * alloc_scale AS ge_hours, n AS samples,
           NULL::DOUBLE AS memory_byte_hours, NULL::DOUBLE AS memory_avg_bytes, cost_factor
    FROM db
    UNION ALL
    SELECT device_id, bucket_start, NULL, 'unknown', ge * ($bh - known_h), 0, NULL, NULL, cost_factor
    FROM db
),
rows AS (SELECT * FROM (SELECT * FROM allocated UNION ALL SELECT * FROM free) WHERE ge_hours > 1e-12)
SELECT $run_id, $start::TIMESTAMP, $end::TIMESTAMP,
       r.bucket_start, r.bucket_start + to_seconds($bs),
       r.device_id, d.gpu_uuid, d.node, d.gpu_model, d.profile, d.sharing_mode, r.tenant, r.state,
       r.ge_hours, r.ge_hours * d.cost_share / d.ge * d.list_price * r.cost_factor,
       r.samples, r.memory_byte_hours, r.memory_avg_bytes
FROM rows r JOIN dev d USING (device_id)
UNION ALL
SELECT $run_id, $start::TIMESTAMP, $end::TIMESTAMP,
       gb.bucket_start, gb.bucket_start + to_seconds($bs),
       gb.gpu_uuid, gb.gpu_uuid, any_value(d.node), any_value(d.gpu_model), 'unpartitioned', 'mig', NULL, s.state,
       greatest(0.0, 1.0 - gb.ge_sum) * s.hours,
       greatest(0.0, 1.0 - gb.share_sum) * s.hours * any_value(d.list_price),
       0, NULL, NULL
FROM an_gpub gb
JOIN an_dev d ON d.gpu_uuid = gb.gpu_uuid
CROSS JOIN LATERAL (VALUES ('unallocated', gb.known_h), ('unknown', $bh - gb.known_h)) s(state, hours)
WHERE gb.is_mig AND (gb.share_sum < 1.0 - 1e-9 OR gb.ge_sum < 1.0 - 1e-9) AND s.hours > 1e-12
GROUP BY gb.bucket_start, gb.gpu_uuid, s.state, s.hours, gb.ge_sum, gb.share_sum
"""


def insert_idle(
    con: duckdb.DuckDBPyConnection, run_id: str, window: Window, interval_s: float, threshold: float
) -> None:
    """Write this run's ``idle_capacity`` rows (the caller holds the transaction)."""
    con.execute(
        "INSERT INTO idle_capacity " + IDLE_SELECT,
        {
            "run_id": run_id,
            "start": window.start,
            "end": window.end,
            "bs": window.bucket_seconds,
            "bh": window.bucket_hours,
            "w": interval_s / 3600.0,
            "thr": threshold,
        },
    )
