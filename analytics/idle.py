"""Idle capacity: per device, tenant and time bucket, the GE-hours and money in each state.

Each sample (device sample or allocation row) stands for one sample interval. Idle is decided per
sample, not per bucket mean: each allocation row's held time is ``allocated-idle`` when the device's
own activity reading at that time is below the threshold, ``allocated-active`` at or above it, and
``allocated-unmeasured`` when the sample has no finite reading (NULL, NaN or infinite, e.g. A100 MIG);
buckets only add these up, so no bucket size changes the idle share. An allocation row with no
device sample at its time is not measured time: it falls into ``unknown``.
The rest of the measured time is ``unallocated``.
Bucket time without device samples, or inside a collection gap, is ``unknown``; holders can never
exceed the measured capacity. A MIG GPU's slices that no GPU instance covers are an
``unpartitioned`` pseudo-device (``device_id`` = GPU UUID), unallocated whenever the GPU reports.
Per GPU and bucket, costs add up to exactly price x bucket hours.

How it runs at fleet scale: the facts are read once each and aggregated per device (its id as read, the
integer key ``dk`` from ``an_dev`` joined to the groups, not to every row) and bucket number ``b`` (0 = the
window's first bucket); every later step works on those small integer keys, and names are joined back
only in the rows written. Temp tables:

- ``an_hold``: per device, bucket, tenant, namespace and workload, the holders' GE-samples, split by the class
  of the device sample at each allocation row's time (idle, active, unmeasured);
- ``an_kb``: per device and bucket, samples, first/last time, activity readings, mean memory, and the
  holders' GE-samples (``an_kb_unlisted``: samples of devices the inventory does not list, which
  only the sample interval uses);
- ``an_life``: per device, its buckets (listed lifetime, stretched to every sampled bucket);
- ``an_db``: per device and bucket of its life, known hours, allocated hours and scale factors, and the
  share its holders held at once (``held_peak``, GE; NULL without holders);
- ``an_gpub``: per GPU split into several devices (MIG) and bucket, shares present;
- ``an_known`` and ``an_alloc``: per device, samples with and without activity readings, and which
  tenants and namespaces held it in the window, each once (what isolation risk reads).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import duckdb

from analytics.facts import Window
from collector.allocation_claims import SPAN_CLAIMS, times_by_bucket_sql

_EPOCH = datetime(1970, 1, 1)

_GAP_FILTER = """
    AND NOT EXISTS (
        SELECT 1 FROM an_gaps g
        WHERE s.ts >= g.gap_start AND s.ts < g.gap_end
          AND (g.target = '' OR g.target = s.node OR g.target = s.gpu_uuid OR g.target = s.device_id)
    )
"""

BUCKET_OF_TS = "CAST((epoch_us(s.ts) - $start_us) // $bs_us AS INTEGER)"
"""SQL: the bucket number of a fact row ``s`` inside the window (needs ``bucket_params``)."""


def bucket_params(window: Window) -> dict[str, object]:
    """Bound parameters of the bucket arithmetic: window start and end, in µs the start and bucket length."""
    return {
        "start": window.start,
        "end": window.end,
        "start_us": (window.start - _EPOCH) // timedelta(microseconds=1),
        "bs_us": window.bucket_seconds * 1_000_000,
    }


def prepare_samples(con: duckdb.DuckDBPyConnection, window: Window, threshold: float) -> None:
    """Read device samples and allocations: ``an_kb``, ``an_hold``, ``an_known``, ``an_alloc``.

    ``threshold`` is the activity ratio below which a sample's held time is idle.

    Each fact is aggregated once per device and bucket, without joining 10M allocation rows to 10M
    samples, in three tiers that give the same numbers as the row-by-row join:

    1. a holder whose rows in a bucket are k at each of the device's sample times there (k x the count,
       k x the sum of the samples' time hashes; k = 2 for two pods of one tenant on a shared GPU) with
       one GE takes k x the bucket's class counts (the usual case: exporter and Prometheus write both at
       the same scrape or step);
    2. in the other buckets, a holder whose rows are k at each sample time between its first and last
       row (a pod that came or went inside the bucket) takes k x the class counts of those samples;
    3. the rest (an allocation row without a sample at its time, a holder that left and came back inside
       the bucket, a GE that changed) join each allocation row to the device sample at its own time.

    A tier decides a bucket only when it decides every holder of it. Equal hash sums of different sets
    of times are as unlikely as a 64-bit hash collision.
    """
    params = bucket_params(window)
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
    # Per device and bucket: samples, their class counts and the sum of their time hashes. Grouped by the device id
    # as read (no join per sample: the device key is joined to the grouped rows, ~15% less CPU than joining each
    # sample to an_dev); samples of devices the inventory does not list get dk NULL, and are what the sample
    # interval alone uses (``an_kb_unlisted``). n and n_activity follow from the class counts (c is 0, 1 or 2).
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE an_kb AS
        SELECT d.dk, k.b, k.n_idle + k.n_active + k.n_unmeasured AS n, k.first_ts, k.last_ts,
               k.n_idle, k.n_active, k.n_unmeasured, k.n_idle + k.n_active AS n_activity,
               k.memory_avg, k.ts_sig, k.device_id
        FROM (
            SELECT device_id, b, min(ts) AS first_ts, max(ts) AS last_ts,
                   count(*) FILTER (WHERE c = 0) AS n_idle, count(*) FILTER (WHERE c = 1) AS n_active,
                   count(*) FILTER (WHERE c = 2) AS n_unmeasured,
                   avg(memory_used_bytes) AS memory_avg, sum(hash(ts)) AS ts_sig
            FROM (
                SELECT s.device_id, {BUCKET_OF_TS} AS b, s.ts, s.memory_used_bytes, {_CLASS} AS c
                FROM f_device_samples s
                WHERE s.ts >= $start AND s.ts < $end {gap_filter}
            )
            GROUP BY ALL
        ) k LEFT JOIN an_dev d USING (device_id)
        """,  # noqa: S608 - constant fragments; values are bound
        {**params, "thr": threshold},
    )
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE an_kb_unlisted AS
        SELECT device_id, b, n, first_ts, last_ts FROM an_kb WHERE dk IS NULL
        """
    )
    con.execute("DELETE FROM an_kb WHERE dk IS NULL")
    # Per holder (device, bucket, tenant, namespace, workload): rows, GE and the sum of their time hashes. Grouped by the
    # device id as read, the device key joined to the grouped rows (rows of unlisted devices: dk NULL, one row
    # per device id; only their existence and an_alloc read them).
    # Read from the claims (collector/allocation_claims.py): per claim and bucket its times' count and hash sum
    # (by prefix sums over a shared grid, else from its generated times; no row per sample is read), then the
    # claims' holders are summed as the per-sample rows would be.
    per_bucket = times_by_bucket_sql("claims", BUCKET_OF_TS, gap_filter, "node, gpu_uuid, device_id" if gap_filter else "")
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE an_held AS
        WITH claims AS (
            SELECT row_number() OVER () AS cid, * FROM f_allocation_claims WHERE {SPAN_CLAIMS}
        ),
        per_bucket AS ({per_bucket})
        SELECT d.dk, h.* FROM (
            SELECT c.device_id, p.b, c.tenant, c.namespace, c.workload_kind, c.workload_name, sum(p.m) AS m,
                   sum(c.gpu_equivalents * p.m) AS ge, min(c.gpu_equivalents) AS ge_lo, max(c.gpu_equivalents) AS ge_hi,
                   sum(p.ts_sig) AS ts_sig, min(p.first_ts) AS first_ts, max(p.last_ts) AS last_ts
            FROM per_bucket p JOIN claims c USING (cid)
            GROUP BY ALL
        ) h LEFT JOIN an_dev d USING (device_id)
        """,  # noqa: S608 - constant fragments; values are bound
        params,
    )
    # A bucket is exact when each of its holders held at exactly the device's sample times with one GE.
    decide = _DECIDE.format(
        holders="(SELECT * FROM an_held WHERE dk IS NOT NULL)",
        covered="(SELECT dk, b, n, n_idle, n_active, n_unmeasured, ts_sig AS sig FROM an_kb)",
        on="c.dk = h.dk AND c.b = h.b",
    )
    con.execute(f"CREATE OR REPLACE TEMP TABLE an_hold AS WITH {decide}")  # noqa: S608 - constant fragments
    if _any_joined(con):
        _cover_ranges(con, params, threshold, gap_filter)
    if _any_joined(con):
        _join_per_sample(con, params, threshold, gap_filter)
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE an_known AS
        SELECT d.device_id, sum(k.n) AS n, sum(k.n_activity) AS n_activity
        FROM an_kb k JOIN an_dev d USING (dk) WHERE k.n > 0 GROUP BY d.device_id
        """
    )
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE an_alloc AS
        SELECT d.device_id, h.tenant, h.namespace
        FROM (SELECT DISTINCT dk, tenant, namespace FROM an_held WHERE dk IS NOT NULL) h JOIN an_dev d USING (dk)
        """
    )
    if _has_unlisted(con):
        con.execute("INSERT INTO an_alloc SELECT DISTINCT device_id, tenant, namespace FROM an_held WHERE dk IS NULL")
    # The holders' sum per device and bucket, for the device buckets, and the share they held at once (each
    # holder's largest GE times the rows it has per device sample, rounded up: exact for holders that stay,
    # never less than the peak for one that comes or goes), which fragmentation leaves out of the free share.
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE an_kb_held AS
        SELECT k.* EXCLUDE (device_id), h.ge_samples, p.held_peak FROM an_kb k
        LEFT JOIN (SELECT dk, b, sum(ge_samples) AS ge_samples FROM an_hold GROUP BY dk, b) h USING (dk, b)
        LEFT JOIN (  -- per tenant and namespace (a workload that follows another inside the bucket: one holder)
            SELECT h.dk, h.b, sum(h.ge_hi * ceil(h.m / k.n)) AS held_peak
            FROM (SELECT dk, b, tenant, namespace, sum(m) AS m, max(ge_hi) AS ge_hi FROM an_held
                  WHERE dk IS NOT NULL GROUP BY ALL) h
            JOIN an_kb k USING (dk, b) WHERE k.n > 0 GROUP BY h.dk, h.b
        ) p USING (dk, b)
        """
    )
    con.execute("DROP TABLE an_held")
    con.execute("DROP TABLE an_kb")
    con.execute("ALTER TABLE an_kb_held RENAME TO an_kb")


_CLASS = """CAST(CASE WHEN s.activity_ratio IS NULL OR NOT isfinite(s.activity_ratio) THEN 2
                     WHEN s.activity_ratio < $thr THEN 0 ELSE 1 END AS UTINYINT)"""
"""SQL: the class of device sample ``s`` (0 idle, 1 active, 2 no finite reading; needs ``$thr``)."""


_DECIDE = """
holder AS (  -- no sample in the holder's bucket (tier 1) or span (tier 2): it held no measured time
    SELECT h.dk, h.b, h.tenant, h.namespace, h.workload_kind, h.workload_name, h.ge_lo, coalesce(h.m // c.n, 0) AS k,
           coalesce(c.n, 0) AS n,
           coalesce(c.n_idle, 0) AS n_idle, coalesce(c.n_active, 0) AS n_active,
           coalesce(c.n_unmeasured, 0) AS n_unmeasured,
           c.n IS NULL OR coalesce(h.m % c.n = 0 AND h.ts_sig = h.m // c.n * c.sig AND h.ge_lo = h.ge_hi, false) AS ok
    FROM {holders} h LEFT JOIN {covered} c ON {on}
),
held AS (  -- a bucket is exact when all its holders are (a group and a join: cheaper than a window over them)
    SELECT h.* EXCLUDE (ok), e.exact
    FROM holder h JOIN (SELECT dk, b, bool_and(ok) AS exact FROM holder GROUP BY dk, b) e USING (dk, b)
)
SELECT dk, b, tenant, namespace, workload_kind, workload_name, ge_lo * k * n AS ge_samples, k * n AS samples,
       ge_lo * k * n_idle AS ge_idle, k * n_idle AS samples_idle,
       ge_lo * k * n_active AS ge_active, k * n_active AS samples_active,
       ge_lo * k * n_unmeasured AS ge_unmeasured, k * n_unmeasured AS samples_unmeasured, false AS joined
FROM held WHERE exact
UNION ALL
SELECT dk, b, tenant, namespace, workload_kind, workload_name, 0, 0, 0, 0, 0, 0, 0, 0, true FROM held WHERE NOT exact
"""
"""SQL after ``WITH``: the holders ``{holders}`` (``an_held`` rows) whose rows are k at each sample time
``{covered}`` counts (n, class counts, ``sig``: the sum of the times' hashes) take k x those counts; a bucket
is decided only when every holder of it is (``joined`` marks the others for the next tier)."""


def _any_joined(con: duckdb.DuckDBPyConnection) -> bool:
    row = con.execute("SELECT count(*) FROM an_hold WHERE joined").fetchone()
    return bool(row and row[0])


def _cover_ranges(con: duckdb.DuckDBPyConnection, params: dict[str, object], threshold: float,
                  gap_filter: str) -> None:
    """The second tier, for buckets marked ``joined``: a holder whose times are exactly the device's sample
    times between its first and last row (a pod that came or went inside the bucket) with one GE takes
    the class counts of those samples. Buckets where every holder is such stay exact; the rest stay
    marked for the row-by-row join."""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE an_hold AS
        WITH slow AS (
            SELECT row_number() OVER () AS hid, h.*
            FROM an_held h SEMI JOIN (SELECT DISTINCT dk, b FROM an_hold WHERE joined) j USING (dk, b)
        ),
        cover AS (
            SELECT s.hid, count(*) AS n, sum(hash(s.ts)) AS sig,
                   count(*) FILTER (WHERE s.c = 0) AS n_idle, count(*) FILTER (WHERE s.c = 1) AS n_active,
                   count(*) FILTER (WHERE s.c = 2) AS n_unmeasured
            FROM (  -- each sample joined by its device id as read (slow carries it), its class after the join
                SELECT h.hid, s.ts, {_CLASS} AS c
                FROM (
                    SELECT s.device_id, {BUCKET_OF_TS} AS b, s.ts, s.activity_ratio
                    FROM f_device_samples s
                    WHERE s.ts >= $start AND s.ts < $end {gap_filter}
                ) s
                JOIN slow h ON h.device_id = s.device_id AND h.b = s.b AND s.ts BETWEEN h.first_ts AND h.last_ts
            ) s
            GROUP BY s.hid
        ),
        {_DECIDE.format(holders="slow", covered="cover", on="c.hid = h.hid")}
        UNION ALL
        SELECT * FROM an_hold WHERE NOT joined  -- the buckets tier 1 decided
        """,  # noqa: S608 - constant fragments; values are bound
        {**params, "thr": threshold},
    )


def _join_per_sample(con: duckdb.DuckDBPyConnection, params: dict[str, object], threshold: float,
                     gap_filter: str) -> None:
    """The holders of the buckets marked ``joined`` in ``an_hold``: each allocation row takes the class of
    the device sample at its own time; a row with no device sample at its time holds no measured time
    (that time is ``unknown``). When few devices have such buckets, the facts are read for those devices
    only (their ids as bound values, which the scan filters on before any join)."""
    devices = [r[0] for r in con.execute(
        "SELECT DISTINCT d.device_id FROM an_hold h JOIN an_dev d USING (dk) WHERE h.joined ORDER BY 1"
    ).fetchall()]
    only = ""
    bound: dict[str, object] = {}
    if len(devices) <= _FEW_DEVICES:
        bound = {f"dev{i}": d for i, d in enumerate(devices)}
        only = f"AND s.device_id IN ({', '.join(f'${k}' for k in bound)})"
    gap_filter = f"{only} {gap_filter}"
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE an_hold AS
        WITH slow AS (SELECT DISTINCT dk, b FROM an_hold WHERE joined),
        cls AS (
            SELECT d.dk, s.ts, {_CLASS} AS c
            FROM f_device_samples s JOIN an_dev d USING (device_id)
            SEMI JOIN slow ON slow.dk = d.dk AND slow.b = {BUCKET_OF_TS}
            WHERE s.ts >= $start AND s.ts < $end {gap_filter}
        ),
        joined AS (
            SELECT d.dk, {BUCKET_OF_TS} AS b, s.tenant, s.namespace, s.workload_kind, s.workload_name,
                   coalesce(sum(s.gpu_equivalents) FILTER (WHERE c.c IS NOT NULL), 0) AS ge_samples,
                   count(*) FILTER (WHERE c.c IS NOT NULL) AS samples,
                   coalesce(sum(s.gpu_equivalents) FILTER (WHERE c.c = 0), 0) AS ge_idle,
                   count(*) FILTER (WHERE c.c = 0) AS samples_idle,
                   coalesce(sum(s.gpu_equivalents) FILTER (WHERE c.c = 1), 0) AS ge_active,
                   count(*) FILTER (WHERE c.c = 1) AS samples_active,
                   coalesce(sum(s.gpu_equivalents) FILTER (WHERE c.c = 2), 0) AS ge_unmeasured,
                   count(*) FILTER (WHERE c.c = 2) AS samples_unmeasured,
                   true AS joined
            FROM f_allocations s JOIN an_dev d USING (device_id)
            SEMI JOIN slow ON slow.dk = d.dk AND slow.b = {BUCKET_OF_TS}
            LEFT JOIN cls c ON c.dk = d.dk AND c.ts = s.ts
            WHERE s.ts >= $start AND s.ts < $end {gap_filter}
            GROUP BY ALL
        )
        SELECT * FROM an_hold WHERE NOT joined
        UNION ALL
        SELECT * FROM joined
        """,  # noqa: S608 - constant fragments; values are bound
        {**params, "thr": threshold, **bound},
    )


_FEW_DEVICES = 2000
"""At most this many devices in the row-by-row buckets: read their facts by device id."""


def _has_unlisted(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the allocations name devices that the inventory does not list (rows of ``an_held`` without a key)."""
    row = con.execute("SELECT count(*) FROM an_held WHERE dk IS NULL").fetchone()
    return bool(row and row[0])


def build_device_buckets(con: duckdb.DuckDBPyConnection, window: Window, interval_s: float) -> None:
    """``an_db``: per device and bucket, known hours, allocated GE-hours and the scale factors."""
    # A device's grid is its listed lifetime, stretched to every bucket it has samples in; the sampled
    # buckets are already in an_kb, so only devices with a bucket missing get the grid generated.
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE an_life AS
        WITH seen AS (
            SELECT dk, min(b) AS first_b, max(b) AS last_b, count(*) AS sampled FROM an_kb WHERE n > 0 GROUP BY dk
        ),
        life AS (
            SELECT d.dk, d.gk, d.ge, d.multi_device, s.sampled,
                   time_bucket(to_seconds($bs),
                               greatest(least(coalesce(d.first_seen, $start),
                                              coalesce($start + to_seconds(s.first_b * $bs), $end)), $start),
                               $start::TIMESTAMP) AS lo,
                   least(greatest(coalesce(d.last_seen, $end), coalesce($start + to_seconds(s.last_b * $bs), $start)),
                         $end - to_seconds($bs)) AS hi
            FROM an_dev d LEFT JOIN seen s USING (dk)
        )
        SELECT dk, gk, ge, multi_device, coalesce(sampled, 0) AS sampled,
               CAST((epoch_us(lo) - $start_us) // $bs_us AS INTEGER) AS lo_b,
               CAST((epoch_us(hi) - $start_us) // $bs_us AS INTEGER) AS hi_b
        FROM life WHERE lo <= hi
        """,
        {**bucket_params(window), "bs": window.bucket_seconds},
    )
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE an_db AS
        WITH missing AS (  -- life buckets without samples (an_kb may hold them if someone held the device)
            SELECT g.dk, g.b FROM (
                SELECT dk, CAST(unnest(range(lo_b, hi_b + 1)) AS INTEGER) AS b
                FROM an_life WHERE sampled < hi_b - lo_b + 1
            ) g ANTI JOIN an_kb k USING (dk, b)
        ),
        keys AS (
            SELECT k.dk, k.b, l.gk, l.ge, l.multi_device, k.n, k.n_activity, k.memory_avg, k.ge_samples, k.held_peak
            FROM an_kb k JOIN an_life l ON l.dk = k.dk AND k.b BETWEEN l.lo_b AND l.hi_b
            UNION ALL
            SELECT m.dk, m.b, l.gk, l.ge, l.multi_device, 0, 0, NULL, NULL, NULL
            FROM missing m JOIN an_life l USING (dk)
        ),
        base AS (
            SELECT dk, b, gk, ge, multi_device, n, n_activity, memory_avg, held_peak,
                   least(n * $w, $bh) AS known_h,
                   CASE WHEN n * $w > $bh THEN $bh / (n * $w) ELSE 1.0 END AS sample_scale,
                   coalesce(ge_samples, 0) * $w AS alloc_raw
            FROM keys
        )
        SELECT *,
               CASE WHEN alloc_raw * sample_scale > ge * known_h AND alloc_raw > 0
                    THEN ge * known_h / (alloc_raw * sample_scale) ELSE 1.0 END AS alloc_scale,
               1.0::DOUBLE AS cost_factor
        FROM base
        """,
        {"w": interval_s / 3600.0, "bh": window.bucket_hours},
    )
    # Per MIG (or multi-device) GPU and bucket: shares present, the unpartitioned remainder, cost factor.
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE an_gpub AS
        SELECT db.gk, db.b,
               sum(d.cost_share) AS share_sum, sum(d.ge) AS ge_sum, max(db.known_h) AS known_h,
               bool_or(d.kind = 'mig') AS is_mig,
               1.0 / greatest(1.0, sum(d.cost_share)) AS cost_factor
        FROM an_db db JOIN an_dev d USING (dk)
        WHERE db.multi_device
        GROUP BY ALL
        """
    )
    # The devices of a split GPU cost the GPU's price at most once (only those rows change).
    con.execute(
        """
        UPDATE an_db SET cost_factor = gb.cost_factor FROM an_gpub gb
        WHERE an_db.multi_device AND an_db.gk = gb.gk AND an_db.b = gb.b AND gb.cost_factor <> 1.0
        """
    )


IDLE_SELECT_TEMPLATE = """
WITH held AS ({held}),
classes AS (  -- each holder's GE-samples by the class of their own sample, never a bucket mean
    SELECT h.dk, h.b, h.tenant, v.i,
           CASE v.i WHEN 0 THEN h.ge_idle WHEN 1 THEN h.ge_active ELSE h.ge_unmeasured END AS ge_samples,
           CASE v.i WHEN 0 THEN h.samples_idle WHEN 1 THEN h.samples_active ELSE h.samples_unmeasured END AS samples
    FROM held h CROSS JOIN (VALUES (0), (1), (2)) v(i)
),
allocated AS (  -- a class without GE-samples has no hours: dropped before the join (rows keeps > 1e-12)
    SELECT c.dk, c.b, c.tenant, ['allocated-idle', 'allocated-active', 'allocated-unmeasured'][c.i + 1] AS state,
           c.ge_samples * $w * db.sample_scale * db.alloc_scale AS ge_hours,
           c.samples,
           c.ge_samples * $w * db.sample_scale * db.alloc_scale / db.ge * db.memory_avg AS memory_byte_hours,
           db.memory_avg AS memory_avg_bytes,
           db.cost_factor
    FROM classes c JOIN an_db db USING (dk, b)
    WHERE c.ge_samples > 0
),
free AS (
    SELECT dk, b, NULL::VARCHAR AS tenant, 'unallocated' AS state,
           ge * known_h - alloc_raw * sample_scale * alloc_scale AS ge_hours, n AS samples,
           NULL::DOUBLE AS memory_byte_hours, NULL::DOUBLE AS memory_avg_bytes, cost_factor
    FROM an_db
    UNION ALL
    SELECT dk, b, NULL, 'unknown', ge * ($bh - known_h), 0, NULL, NULL, cost_factor
    FROM an_db
),
rows AS (SELECT * FROM (SELECT * FROM allocated UNION ALL SELECT * FROM free) WHERE ge_hours > 1e-12)
SELECT $part_id,
       $start::TIMESTAMP + to_seconds(r.b * $bs), $start::TIMESTAMP + to_seconds((r.b + 1) * $bs),
       d.device_id, d.gpu_uuid, d.node, d.gpu_model, d.profile, d.sharing_mode, r.tenant, r.state,
       r.ge_hours, r.ge_hours * d.cost_share / d.ge * d.list_price * r.cost_factor,
       r.samples, r.memory_byte_hours, r.memory_avg_bytes
FROM rows r JOIN an_dev d USING (dk)
UNION ALL
SELECT $part_id,
       $start::TIMESTAMP + to_seconds(gb.b * $bs), $start::TIMESTAMP + to_seconds((gb.b + 1) * $bs),
       any_value(d.gpu_uuid), any_value(d.gpu_uuid), any_value(d.node), any_value(d.gpu_model), 'unpartitioned',
       'mig', NULL, s.state,
       greatest(0.0, 1.0 - gb.ge_sum) * s.hours,
       greatest(0.0, 1.0 - gb.share_sum) * s.hours * any_value(d.list_price),
       0, NULL, NULL
FROM an_gpub gb
JOIN an_dev d ON d.gk = gb.gk
CROSS JOIN LATERAL (VALUES ('unallocated', gb.known_h), ('unknown', $bh - gb.known_h)) s(state, hours)
WHERE gb.is_mig AND (gb.share_sum < 1.0 - 1e-9 OR gb.ge_sum < 1.0 - 1e-9) AND s.hours > 1e-12
GROUP BY gb.b, gb.gk, s.state, s.hours, gb.ge_sum, gb.share_sum
"""


def insert_idle(con: duckdb.DuckDBPyConnection, part_id: str, window: Window, interval_s: float) -> None:
    """Write the ``idle_capacity`` rows of one day part spanning ``window`` (the caller holds the transaction)."""
    con.execute(
        "INSERT INTO idle_capacity_parts " + idle_select(con),
        {
            "part_id": part_id,
            "start": window.start,
            "bs": window.bucket_seconds,
            "bh": window.bucket_hours,
            "w": interval_s / 3600.0,
        },
    )


_HELD = ("ge_idle", "samples_idle", "ge_active", "samples_active", "ge_unmeasured", "samples_unmeasured")
"""Columns of ``an_hold`` that the idle query reads."""


def idle_select(con: duckdb.DuckDBPyConnection) -> str:
    """The ``idle_capacity`` query; ``an_hold`` rows are summed over namespaces and workloads only where a
    tenant held one device in one bucket from several of them."""
    row = con.execute(
        "SELECT count(*) FROM (SELECT dk, b, tenant FROM an_hold GROUP BY ALL HAVING count(*) > 1 LIMIT 1)"
    ).fetchone()
    if row is not None and row[0]:
        summed = ", ".join(f"sum({c}) AS {c}" for c in _HELD)
        held = f"SELECT dk, b, tenant, {summed} FROM an_hold GROUP BY ALL"  # noqa: S608 - constant columns
    else:
        held = f"SELECT dk, b, tenant, {', '.join(_HELD)} FROM an_hold"  # noqa: S608 - constant columns
    return IDLE_SELECT_TEMPLATE.replace("{held}", held)
