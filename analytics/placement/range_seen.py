"""Placements of a day cut into node ranges: what each range part stores so that the merge sees the day's.

A workload's placement is the set of (pod, GPU) pairs it held at one sample time, over every node: a
workload whose pods sit in two ranges has half its set in each. So a range part does not decide
placements; it stores what adds up (``part_placement_*``), for every owner with whole GPUs held
exclusively in the range:

- per owner and pod, its smallest and largest GPU (a pod of 2+ GPUs makes its owner multi-device);
- per owner and sample time, the sum of the pairs' hashes (the day's placement key is the sum over the
  ranges), the rows and the GE held;
- per owner and range-local set (its hash sum), the set's sorted pairs.

:data:`MERGED_PLACEMENTS` adds them up per day, owner and time and gives the rows ``part_placements``
would hold for the whole day (:func:`analytics.placement.run.seen`): the same owners (a gang kind, or a
pod of 2+ GPUs), the same keys, times, GE and pairs at the first time.
"""

from __future__ import annotations

import duckdb

from analytics.facts import Window
from analytics.placement.run import _GANGS, _OWNER, _OWNER_NO_GANGS, _WHOLE_GPU
from analytics.placement.settings import TopologySettings
from gpulens.core.tenancy.gangs import GROUP_KINDS

_HELD = """
CREATE OR REPLACE TEMP TABLE an_range_pods AS
WITH gangs AS ({gangs}),
held AS (  -- the range's claims of whole GPUs held exclusively: few rows, one per holder's run
    SELECT a.namespace, {owner}, a.pod, a.gpu_uuid
    FROM f_allocation_claims a JOIN devices d ON d.device_id = a.device_id {join}
    WHERE a.ts >= CAST(CAST($start AS DATE) AS TIMESTAMP) AND a.ts < $end AND a.last_ts >= $start AND {whole_gpu}
)
SELECT namespace, kind, wname, pod, min(gpu_uuid) AS gpu_lo, max(gpu_uuid) AS gpu_hi FROM held GROUP BY ALL
"""
"""Per owner and pod of the range, its smallest and largest whole GPU (read from the claims)."""

_ROWS = """
CREATE OR REPLACE TEMP TABLE an_range_rows AS
WITH gangs AS ({gangs}),
candidates AS (  -- owners that may be multi-device from what this range holds: a gang kind, a pod of 2+ GPUs
    SELECT DISTINCT namespace, kind, wname FROM an_range_pods
    WHERE gpu_lo <> gpu_hi OR list_contains($gang_kinds, kind)
),
rows AS (
    SELECT a.namespace, {owner}, a.ts, a.pod, a.tenant, a.gpu_uuid, a.gpu_equivalents, hash(a.pod, a.gpu_uuid) AS h
    FROM f_allocations a JOIN devices d ON d.device_id = a.device_id {join}
    SEMI JOIN (SELECT DISTINCT p.namespace, p.pod FROM an_range_pods p SEMI JOIN candidates c USING (namespace, kind, wname)) cp
      ON cp.namespace = a.namespace AND cp.pod = a.pod
    WHERE a.ts >= $start AND a.ts < $end AND {whole_gpu}
)
SELECT r.* FROM rows r SEMI JOIN candidates c USING (namespace, kind, wname)
"""
"""The rows of the range's candidate owners: whole GPUs held exclusively in the span, each with its owner (as
``seen`` names it). An owner whose pods here are all single-GPU and of no gang kind is left out: it is
multi-device only if a pod of it elsewhere held 2+ GPUs, which the merge sees in the pods and says."""

_PODS = """
INSERT INTO part_placement_pods SELECT $part_id, namespace, kind, wname, pod, gpu_lo, gpu_hi FROM an_range_pods
"""

_TIMES = """
INSERT INTO part_placement_times
SELECT $part_id, namespace, kind, wname, ts, any_value(tenant), sum(h), count(*), sum(gpu_equivalents)
FROM an_range_rows GROUP BY namespace, kind, wname, ts
"""

_PAIRS = """
INSERT INTO part_placement_pairs
WITH sets AS (SELECT namespace, kind, wname, ts, sum(h) AS sig FROM an_range_rows GROUP BY namespace, kind, wname, ts),
firsts AS (SELECT namespace, kind, wname, sig, min(ts) AS ts FROM sets GROUP BY ALL)
SELECT $part_id, f.namespace, f.kind, f.wname, f.sig, list_sort(list_distinct(list(r.pod || '|' || r.gpu_uuid)))
FROM firsts f JOIN an_range_rows r USING (namespace, kind, wname, ts)
GROUP BY f.namespace, f.kind, f.wname, f.sig
"""


def insert_range_seen(con: duckdb.DuckDBPyConnection, part_id: str, window: Window, settings: TopologySettings) -> None:
    """Write a node range part's ``part_placement_pods``, ``_times`` and ``_pairs`` (the caller holds the
    transaction)."""
    group_kinds = sorted(GROUP_KINDS)
    gangs = con.execute(f"SELECT EXISTS ({_GANGS})", {"end": window.end, "group_kinds": group_kinds}).fetchone()  # noqa: S608
    owner, join = _OWNER if gangs and gangs[0] else _OWNER_NO_GANGS
    p = {"start": window.start, "end": window.end, "group_kinds": group_kinds}
    con.execute(_HELD.format(gangs=_GANGS, owner=owner, join=join, whole_gpu=_WHOLE_GPU), p)
    con.execute(_ROWS.format(gangs=_GANGS, owner=owner, join=join, whole_gpu=_WHOLE_GPU),
                {**p, "gang_kinds": sorted(settings.gang_kinds)})
    try:
        for statement in (_PODS, _TIMES, _PAIRS):
            con.execute(statement, {"part_id": part_id})
    finally:
        con.execute("DROP TABLE an_range_rows")
        con.execute("DROP TABLE an_range_pods")


MERGED_PLACEMENTS = """
WITH parts AS (SELECT part_id, part_start AS day FROM analysis_parts WHERE list_contains($ids, part_id)),
pods AS (
    SELECT p.day, x.namespace, x.kind, x.wname, min(x.gpu_lo) <> max(x.gpu_hi) AS multi_gpu
    FROM part_placement_pods x JOIN parts p USING (part_id) GROUP BY p.day, x.namespace, x.kind, x.wname, x.pod
),
owners AS (  -- as seen(): a gang kind, or an owner with a pod that held 2+ whole GPUs in the day
    SELECT day, namespace, kind, wname FROM pods
    GROUP BY ALL HAVING bool_or(multi_gpu) OR list_contains($gang_kinds, kind)
),
sets AS (  -- per owner and sample time over every range: the placement's key, pairs and GE
    SELECT p.day, t.namespace, t.kind, t.wname, t.ts, any_value(t.tenant) AS tenant, sum(t.sig) AS sig_key,
           sum(t.pairs) AS pairs, sum(t.ge) AS ge, list({'part_id': t.part_id, 'sig': t.sig}) AS locals
    FROM part_placement_times t JOIN parts p USING (part_id)
    SEMI JOIN owners o ON o.day = p.day AND o.namespace = t.namespace AND o.kind = t.kind AND o.wname = t.wname
    GROUP BY p.day, t.namespace, t.kind, t.wname, t.ts
),
placements AS (
    SELECT day, namespace, kind, wname, sig_key, any_value(tenant) AS tenant, count(*) AS samples,
           sum(ge)::DOUBLE AS ge_samples, min(ts) AS first_ts, max(ts) AS last_ts, arg_min(locals, ts) AS locals
    FROM sets WHERE pairs >= 2
    GROUP BY day, namespace, kind, wname, sig_key
),
firsts AS (  -- each range's set at the placement's first time
    SELECT day, namespace, kind, wname, sig_key, unnest(locals, recursive := true) FROM placements
),
pairs AS (
    SELECT f.day, f.namespace, f.kind, f.wname, f.sig_key, list_sort(list_distinct(flatten(list(x.pairs)))) AS sig
    FROM firsts f JOIN part_placement_pairs x
      ON x.part_id = f.part_id AND x.namespace = f.namespace AND x.kind = f.kind AND x.wname = f.wname AND x.sig = f.sig
    GROUP BY f.day, f.namespace, f.kind, f.wname, f.sig_key
)
SELECT p.namespace, p.kind, p.wname, p.tenant, x.sig, p.samples, p.ge_samples, p.first_ts, p.last_ts
FROM placements p JOIN pairs x USING (day, namespace, kind, wname, sig_key)
"""
"""The rows of ``part_placements`` (without ``part_id``) of the node range parts ``$ids``, per day as one whole
day's part would hold them (``$gang_kinds``: the owner kinds that are multi-device with one GPU per pod)."""

INCOMPLETE_OWNERS = """
WITH parts AS (SELECT part_id, part_start AS day FROM analysis_parts WHERE list_contains($ids, part_id)),
pods AS (SELECT p.day, x.part_id, x.namespace, x.kind, x.wname, x.gpu_lo <> x.gpu_hi AS multi_gpu
         FROM part_placement_pods x JOIN parts p USING (part_id)),
multi AS (SELECT day, namespace, kind, wname FROM pods GROUP BY ALL HAVING bool_or(multi_gpu)),
local AS (  -- per part, the owners it stored times of (a candidate there)
    SELECT part_id, namespace, kind, wname, bool_or(multi_gpu) OR list_contains($gang_kinds, kind) AS candidate
    FROM pods GROUP BY part_id, namespace, kind, wname
)
SELECT DISTINCT m.day, m.namespace, m.kind, m.wname
FROM multi m JOIN pods p USING (day, namespace, kind, wname) JOIN local l USING (part_id, namespace, kind, wname)
WHERE NOT l.candidate AND NOT list_contains($gang_kinds, m.kind)
ORDER BY ALL
"""
"""Owners multi-device over the day (a pod of 2+ GPUs in one node range) with single-GPU pods in another range,
whose times that range did not store: their merged placements lack those pods' pairs."""


def incomplete_owners(con: duckdb.DuckDBPyConnection, part_ids: list[str],
                      gang_kinds: tuple[str, ...]) -> list[tuple[object, ...]]:
    """The (day, namespace, kind, workload) whose placements a node-range merge gives without the pods of a
    range where they looked single-device (analysing those days whole gives them in full)."""
    return con.execute(INCOMPLETE_OWNERS, {"ids": part_ids, "gang_kinds": sorted(gang_kinds)}).fetchall()
