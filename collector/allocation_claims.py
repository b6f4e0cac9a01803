"""Allocations stored as claims: one row per run of samples in which a holder held a device unchanged.

Who holds a device changes a few times a day, yet the collector sees it at every sample. A **claim** is one
row of ``allocation_claims``: the allocation row's columns (device, holder, tenant, share, ...) and the
sample times it stands for, as an arithmetic progression: ``ts`` (the first), ``step_us`` (microseconds
between them; 0 for a claim of one sample), ``samples`` and ``last_ts``. A claim is extended while the next
sample agrees in every column and comes exactly one step later; any change, or a missing sample (a gap, a
scrape that failed, a pod that left and came back), closes it and starts another. The progression is exact,
so the view ``allocations`` expands the claims into the very rows they stand for: every reader of the
per-sample table reads the same rows as before, and nothing about a holder is lost (irregular sample times
make more claims, never wrong ones). A claim never runs over a UTC midnight, so the claims that can touch a
span start at most a day before it: every read of them is bounded by ``ts`` (DuckDB's zone maps), however
long the store's history.

The SQL here is the one place that builds claims from samples (ingest and the migration of an older store),
extends stored claims with a new window's, expands them, and cuts them at UTC midnights (Parquet export).
"""

from __future__ import annotations

import duckdb

CLAIMS_TABLE = "allocation_claims"
"""The table that stores the ``allocations`` fact."""

HOLDING = (
    "node", "gpu_uuid", "device_id", "namespace", "pod", "container", "tenant", "sharing_mode",
    "gpu_equivalents", "workload_kind", "workload_name", "source",
)
"""The columns a claim's samples agree in: every allocation column but ``ts``."""

TIMING = ("ts", "last_ts", "step_us", "samples")
"""How a claim names its sample times: first, last, the step between them (µs; 0 for one) and their count."""

TIMING_COLUMNS = """
        ts TIMESTAMP NOT NULL,            -- the claim's first sample time
        last_ts TIMESTAMP NOT NULL,       -- its last (ts + (samples - 1) x step), the same UTC day
        step_us BIGINT NOT NULL,          -- microseconds between its samples; 0 for a one-sample claim
        samples INTEGER NOT NULL,"""
"""The columns of ``allocation_claims`` before the allocation's own (``collector/schema.py`` adds those)."""

SPAN_CLAIMS = "ts >= CAST(CAST($start AS DATE) AS TIMESTAMP) AND ts < $end AND last_ts >= $start"
"""SQL: a claim has sample times inside ``[$start, $end)`` by its bounds (the first condition prunes row groups)."""

DAY_BEFORE = "CAST(CAST($lo AS DATE) AS TIMESTAMP)"
"""SQL: the UTC midnight before ``$lo``; no claim that reaches ``$lo`` or later starts before it."""

MAX_STEP_US = 3_600_000_000
"""The longest step a claim spans (an hour): samples further apart are separate claims."""

_HOLD = ", ".join(HOLDING)
_SAME = " AND ".join(f"c.{k} IS NOT DISTINCT FROM n.{k}" for k in HOLDING)


def expand_sql(claims: str, columns: tuple[str, ...]) -> str:
    """SQL: the per-sample rows (``columns`` in order, ``ts`` among them) of the claims relation ``claims``.

    A relation without claim columns (per-sample rows, e.g. Parquet exported by an earlier release) reads as
    claims of one sample each, so both layouts, even mixed in one folder, expand to the same rows."""
    out = ", ".join("ts + to_microseconds(step_us * k) AS ts" if c == "ts" else c for c in columns)
    return (
        f"SELECT {out} FROM (SELECT *, unnest(range(samples)) AS k FROM {claims})"  # noqa: S608 - our names
    )


def claims_of_samples_sql(samples: str) -> str:
    """SQL: the claims of the per-sample relation ``samples`` (rows unique on device, ts and holder).

    Per holder in time order, a claim runs while each sample is one step after the one before; the step is
    the source's most common spacing of a holder's successive samples (one scrape or step of the window), so
    irregular times only make more claims. A one-sample claim has step 0."""
    return f"""
        WITH s AS (
            SELECT {_HOLD}, ts, epoch_us(ts) - lag(epoch_us(ts)) OVER w AS d
            FROM {samples} WINDOW w AS (PARTITION BY {_HOLD} ORDER BY ts)
        ),
        step AS (
            SELECT source, mode(d) AS step_us FROM s WHERE d > 0 AND d <= {MAX_STEP_US} GROUP BY source
        ),
        runs AS (
            SELECT s.*, sum(CASE WHEN s.d IS NOT DISTINCT FROM st.step_us THEN 0 ELSE 1 END)
                          OVER (PARTITION BY {", ".join(f"s.{k}" for k in HOLDING)} ORDER BY s.ts) AS run,
                   coalesce(st.step_us, 0) AS step_us
            FROM s LEFT JOIN step st USING (source)
        )
        SELECT min(ts) AS ts, max(ts) AS last_ts,
               CASE WHEN count(*) > 1 THEN any_value(step_us) ELSE 0 END AS step_us,
               CAST(count(*) AS INTEGER) AS samples, {_HOLD}
        FROM runs GROUP BY {_HOLD}, run, CAST(ts AS DATE)  -- a run over midnight: one claim per day
    """  # noqa: S608 - our names


def add_samples(con: duckdb.DuckDBPyConnection, samples: str, lo: object, hi: object) -> int:
    """Store the per-sample relation ``samples`` (all its times within ``[lo, hi]``) as claims, less the rows
    already stored (their device, time and holder), extending a stored claim where a new one continues it;
    returns the samples added. Runs in the caller's transaction."""
    stored = expand_sql(
        f"(SELECT * FROM {CLAIMS_TABLE} WHERE ts >= {DAY_BEFORE} AND ts <= $hi AND last_ts >= $lo)",  # noqa: S608
        ("ts", *HOLDING),
    )
    key = " AND ".join(f"n.{k} = t.{k}" for k in ("device_id", "ts", "namespace", "pod", "container"))
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _claim_fresh AS
            SELECT n.ts, {", ".join(f"n.{k}" for k in HOLDING)} FROM {samples} n
            WHERE NOT EXISTS (SELECT 1 FROM ({stored}) t WHERE t.ts BETWEEN $lo AND $hi AND {key})""",  # noqa: S608
        {"lo": lo, "hi": hi},
    )
    added = con.execute("SELECT count(*) FROM _claim_fresh").fetchall()[0][0]
    if not added:
        con.execute("DROP TABLE _claim_fresh")
        return 0
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE _claim_new AS SELECT row_number() OVER () AS nid, * "  # noqa: S608
        f"FROM ({claims_of_samples_sql('_claim_fresh')})"
    )
    # A stored claim that ends one step before a new one starts (with that step, or a one-sample claim that
    # the new first sample gives its step) takes it over; each side matched at most once.
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _claim_join AS
            WITH m AS (
                SELECT c.rowid AS rid, n.nid, c.ts AS c_ts, n.ts AS n_ts,
                       CASE WHEN c.samples = 1 THEN epoch_us(n.ts) - epoch_us(c.ts) ELSE c.step_us END AS step_us
                FROM {CLAIMS_TABLE} c JOIN _claim_new n ON {_SAME}
                WHERE c.ts >= CAST(CAST($lo - INTERVAL 1 HOUR AS DATE) AS TIMESTAMP) AND c.ts <= $hi
                  AND c.last_ts < n.ts AND c.last_ts >= $lo - INTERVAL 1 HOUR
                  AND CAST(c.ts AS DATE) = CAST(n.ts AS DATE)  -- a claim stays within its day
                  AND ((c.samples > 1 AND epoch_us(n.ts) = epoch_us(c.last_ts) + c.step_us
                        AND (n.samples = 1 OR n.step_us = c.step_us))
                    OR (c.samples = 1 AND epoch_us(n.ts) - epoch_us(c.ts) <= {MAX_STEP_US}
                        AND (n.samples = 1 OR n.step_us = epoch_us(n.ts) - epoch_us(c.ts))))
                QUALIFY row_number() OVER (PARTITION BY n.nid ORDER BY c.ts DESC) = 1
            )
            SELECT rid, nid, step_us FROM m QUALIFY row_number() OVER (PARTITION BY rid ORDER BY n_ts) = 1""",  # noqa: S608
        {"lo": lo, "hi": hi},
    )
    con.execute(
        f"""UPDATE {CLAIMS_TABLE} SET last_ts = n.last_ts, samples = {CLAIMS_TABLE}.samples + n.samples,
                   step_us = j.step_us
            FROM _claim_join j JOIN _claim_new n USING (nid) WHERE {CLAIMS_TABLE}.rowid = j.rid"""  # noqa: S608
    )
    con.execute(
        f"""INSERT INTO {CLAIMS_TABLE} ({", ".join(TIMING)}, {_HOLD})
            SELECT {", ".join(TIMING)}, {_HOLD} FROM _claim_new n ANTI JOIN _claim_join j USING (nid)"""  # noqa: S608
    )
    for table in ("_claim_fresh", "_claim_new", "_claim_join"):
        con.execute(f"DROP TABLE {table}")
    return int(added)


def claims_by_day_sql(claims: str) -> str:
    """SQL: the claims of ``claims`` cut at UTC midnights, each piece with its ``date`` (a claim that runs
    over midnight becomes one claim per day, holding that day's samples), for a day-partitioned export."""
    return f"""
        WITH c AS (
            SELECT *, epoch_us(ts) AS t0, unnest(generate_series(CAST(ts AS DATE), CAST(last_ts AS DATE),
                                                                 INTERVAL 1 DAY)) AS day
            FROM {claims}
        ),
        k AS (
            SELECT *, CASE WHEN step_us = 0 THEN 0
                           ELSE greatest(0, (epoch_us(day) - t0 + step_us - 1) // step_us) END AS k_lo,
                      CASE WHEN step_us = 0 THEN 0
                           ELSE least(samples - 1, (epoch_us(day + INTERVAL 1 DAY) - 1 - t0) // step_us) END AS k_hi
            FROM c
        )
        SELECT make_timestamp(t0 + step_us * k_lo) AS ts, make_timestamp(t0 + step_us * k_hi) AS last_ts,
               CASE WHEN k_hi > k_lo THEN step_us ELSE 0 END AS step_us, CAST(k_hi - k_lo + 1 AS INTEGER) AS samples,
               {_HOLD}, CAST(day AS DATE) AS date
        FROM k WHERE k_hi >= k_lo
    """  # noqa: S608 - our names


def claims_of_relation_sql(rel_sql: str, columns: set[str]) -> str:
    """SQL: claims from a relation that holds claims (``samples`` among ``columns``), per-sample rows (an
    export of an earlier release: one-sample claims), or both mixed (``samples`` NULL in the older files)."""
    if "samples" not in columns:
        return f"SELECT ts, ts AS last_ts, CAST(0 AS BIGINT) AS step_us, 1 AS samples, * EXCLUDE (ts) FROM ({rel_sql})"  # noqa: S608
    return (
        "SELECT * REPLACE (coalesce(last_ts, ts) AS last_ts, coalesce(step_us, 0) AS step_us, "  # noqa: S608
        f"coalesce(samples, 1) AS samples) FROM ({rel_sql})"
    )


def add_sample_rows(con: duckdb.DuckDBPyConnection, query: str, params: object = None) -> int:
    """Store the allocation rows a query returns (columns named as ``allocations``' are, any subset but the
    key; the others NULL; the first of equal keys wins) as claims; returns the samples added. For tools and
    tests that write allocations without a :class:`collector.store.Store` window."""
    given = {r[0] for r in con.execute(f"DESCRIBE {query}", params).fetchall()}  # noqa: S608 - the caller's query
    every = ", ".join(c if c in given else f"NULL AS {c}" for c in ("ts", *HOLDING))
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE _claim_rows AS SELECT {every} FROM ({query})
            QUALIFY row_number() OVER (PARTITION BY device_id, ts, namespace, pod, container) = 1""",  # noqa: S608
        params,
    )
    lo, hi = con.execute("SELECT min(ts), max(ts) FROM _claim_rows").fetchall()[0]
    try:
        return add_samples(con, "_claim_rows", lo, hi) if lo is not None else 0
    finally:
        con.execute("DROP TABLE _claim_rows")


def times_in_sql(claims: str, columns: str = "") -> str:
    """SQL: ``(cid, ts[, columns])`` per sample time of each claim of ``claims`` (which has a ``cid``) inside
    ``[$start, $end)``: only the times in the span are generated, however long the claim."""
    extra = f", {columns}" if columns else ""
    return f"""
        SELECT cid, make_timestamp(t0 + step_us * k) AS ts{extra} FROM (
            SELECT *, unnest(range(k_lo, k_hi + 1)) AS k FROM (
                SELECT cid, epoch_us(ts) AS t0, step_us{extra},
                       CASE WHEN step_us = 0 THEN 0
                            ELSE greatest(0, (epoch_us($start) - epoch_us(ts) + step_us - 1) // step_us) END AS k_lo,
                       CASE WHEN step_us = 0 THEN 0
                            ELSE least(samples - 1, (epoch_us($end) - 1 - epoch_us(ts)) // step_us) END AS k_hi
                FROM {claims} WHERE {SPAN_CLAIMS}
            )
        )  -- the bounds of k keep every time inside the span
    """  # noqa: S608 - our names


DENSE_GRID = 4
"""A grid is summed by prefix when its claims hold at least this many times per grid point in the span."""


def times_by_bucket_sql(claims: str, bucket_of_ts: str, sample_filter: str = "", columns: str = "",
                        dense_grid: int = DENSE_GRID) -> str:
    """SQL: per claim of ``claims`` (which has a ``cid``) and bucket of the span ``[$start, $end)`` (``$start_us``
    and ``$bs_us``: the span's start and bucket length in µs; ``bucket_of_ts``: SQL of a time ``s.ts``'s bucket
    number from them), ``(cid, b, m, ts_sig, first_ts, last_ts)``: how
    many of its sample times lie in the bucket, the sum of their ``hash(ts)``, the first and the last.

    Claims on a grid (step and phase) that holds at least ``dense_grid`` claimed times per grid point in the
    span, as exporters sampled on one clock or Prometheus steps give, are summed without a row per time: a prefix
    sum of the hashes over the grid's points, each claim's piece of a bucket its difference (exact: the same
    sums of the same hashes). The others, and every claim when ``sample_filter`` (SQL on a time ``s`` with
    ``columns``, e.g. a gap filter) drops single times, generate their times."""
    generated = f"""
        SELECT s.cid, {bucket_of_ts} AS b, count(*) AS m, sum(hash(s.ts)) AS ts_sig, min(s.ts) AS first_ts,
               max(s.ts) AS last_ts
        FROM ({{times}}) s WHERE true {sample_filter}
        GROUP BY ALL
    """  # noqa: S608 - our fragments
    if sample_filter:
        return generated.format(times=times_in_sql(claims, columns))
    sparse = generated.format(times=times_in_sql(f"(SELECT * FROM {claims} ANTI JOIN on_grid USING (cid))"))  # noqa: S608
    return f"""
        WITH stepped AS (
            SELECT cid, epoch_us(ts) AS t0, step_us, epoch_us(ts) % nullif(step_us, 0) AS phase,
                   greatest(0, ($start_us - epoch_us(ts) + step_us - 1) // nullif(step_us, 0)) AS k_lo,
                   least(samples - 1, (epoch_us($end) - 1 - epoch_us(ts)) // nullif(step_us, 0)) AS k_hi
            FROM {claims} WHERE step_us > 0 AND {SPAN_CLAIMS}
        ),
        grids AS (  -- g0: the grid's first point in the span
            SELECT step_us, phase, $start_us + ((phase - $start_us) % step_us + step_us) % step_us AS g0
            FROM stepped WHERE k_lo <= k_hi GROUP BY step_us, phase
            HAVING sum(k_hi - k_lo + 1) >= {int(dense_grid)} * ((epoch_us($end) - $start_us) // step_us + 1)
        ),
        on_grid AS (  -- j0: the grid index of the claim's first time (negative when it began before the span)
            SELECT c.*, (c.t0 - g.g0) // c.step_us AS j0 FROM stepped c JOIN grids g USING (step_us, phase)
            WHERE c.k_lo <= c.k_hi
        ),
        points AS (
            SELECT step_us, phase, j, hash(make_timestamp(g0 + step_us * j)) AS h,
                   sum(hash(make_timestamp(g0 + step_us * j))) OVER (PARTITION BY step_us, phase ORDER BY j) AS upto
            FROM (SELECT *, unnest(range(0, (epoch_us($end) - 1 - g0) // step_us + 1)) AS j FROM grids)
        ),
        pieces AS (  -- a claim's first and last time in each bucket it reaches (ka, kb)
            SELECT cid, t0, step_us, phase, j0, b,
                   greatest(k_lo, ($start_us + b * $bs_us - t0 + step_us - 1) // step_us) AS ka,
                   least(k_hi, ($start_us + (b + 1) * $bs_us - 1 - t0) // step_us) AS kb
            FROM (SELECT *, unnest(range((t0 + step_us * k_lo - $start_us) // $bs_us,
                                         (t0 + step_us * k_hi - $start_us) // $bs_us + 1)) AS b FROM on_grid)
        )
        SELECT p.cid, CAST(p.b AS INTEGER) AS b, p.kb - p.ka + 1 AS m, hi.upto - lo.upto + lo.h AS ts_sig,
               make_timestamp(p.t0 + p.step_us * p.ka) AS first_ts, make_timestamp(p.t0 + p.step_us * p.kb) AS last_ts
        FROM pieces p
        JOIN points lo ON lo.step_us = p.step_us AND lo.phase = p.phase AND lo.j = p.j0 + p.ka
        JOIN points hi ON hi.step_us = p.step_us AND hi.phase = p.phase AND hi.j = p.j0 + p.kb
        WHERE p.ka <= p.kb
        UNION ALL
        {sparse}
    """  # noqa: S608 - our names


SAMPLES_IN_SPAN = """
    CASE WHEN step_us = 0 THEN CAST(ts >= $start AND ts < $end AS BIGINT)
         ELSE greatest(0, least(samples - 1, (epoch_us($end) - 1 - epoch_us(ts)) // step_us)
                          - greatest(0, (epoch_us($start) - epoch_us(ts) + step_us - 1) // step_us) + 1) END
"""
"""SQL: how many of a claim's sample times lie inside ``[$start, $end)`` (no time is generated)."""
