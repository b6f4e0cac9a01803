"""What a day part stores of placements, and what the merge of a window's parts gives.

A workload's placement is the set of (pod, GPU) pairs it held at one sample time, over every node. A part
(a whole day, or one node range of a day: a workload whose pods sit in two ranges has half its set in
each) stores what adds up, for every owner with whole GPUs held exclusively in its span:

- ``part_placement_pods``: per owner and pod, its smallest and largest GPU (a pod of 2+ GPUs makes its
  owner multi-device over the day);
- ``part_placement_times``: per owner that may be multi-device from what the part holds (a gang kind, a
  pod of 2+ GPUs) and sample time, the sum of the hashes of its distinct pairs (the day's placement key
  is the sum over the ranges, which hold different GPUs), the distinct pairs and the GE held;
- ``part_placement_runs``: per such owner, its claims of whole GPUs clipped to the span (pod, GPU, first
  and last sample time, step): the pairs of every placement, without listing any placement's pairs. A
  workload whose set changes every minute stores its claims (a few per pod and day), not a copy of every
  set it held.

:data:`MERGED_OWNERS`, :data:`MERGED_TIMES` and :data:`MERGED_RUNS` add them up over the window's parts: the owners multi-device
in a day (a gang kind, or a pod of 2+ GPUs), their keys per sample time and their runs;
:mod:`analytics.placement.held_pairs` rebuilds each placement's pairs from the runs at its first time.
"""

from __future__ import annotations

import duckdb

from analytics.facts import Window
from analytics.placement.settings import TopologySettings
from collector.allocation_claims import SPAN_CLAIMS
from gpulens.core.tenancy.gangs import GROUP_KINDS

GANGS = """
    SELECT namespace, pod, arg_max(workload_kind, ts) AS gkind, arg_max(workload_name, ts) AS gname
    FROM f_pod_snapshots WHERE ts < $end AND list_contains($group_kinds, workload_kind) GROUP BY namespace, pod
"""
"""Pods the collector's pod inventory names as part of a LeaderWorkerSet / pod-group job the owner chain splits."""

_OWNER = ("coalesce(g.gkind, a.workload_kind, 'Pod') AS kind, coalesce(g.gname, a.workload_name, a.pod) AS wname",
          "LEFT JOIN gangs g ON g.namespace = a.namespace AND g.pod = a.pod")
_OWNER_NO_GANGS = ("coalesce(a.workload_kind, 'Pod') AS kind, coalesce(a.workload_name, a.pod) AS wname", "")

WHOLE_GPU = "d.kind = 'gpu' AND coalesce(a.sharing_mode, d.sharing_mode, 'exclusive') = 'exclusive'"
"""An allocation row (``a``, joined to ``devices d``) that holds a whole GPU exclusively."""

_CLAIMS = """
CREATE OR REPLACE TEMP TABLE an_seen_claims AS
WITH gangs AS ({gangs}),
held AS (  -- the span's claims of whole GPUs held exclusively, each with its owner and its sample times in the span
    SELECT a.namespace, {owner}, a.pod, a.gpu_uuid, a.tenant, a.gpu_equivalents::DOUBLE AS ge, epoch_us(a.ts) AS t0,
           a.step_us, hash(a.pod, a.gpu_uuid) AS h,
           CASE WHEN a.step_us = 0 THEN 0
                ELSE greatest(0, (epoch_us($start) - epoch_us(a.ts) + a.step_us - 1) // a.step_us) END AS k_lo,
           CASE WHEN a.step_us = 0 THEN 0
                ELSE least(a.samples - 1, (epoch_us($end) - 1 - epoch_us(a.ts)) // a.step_us) END AS k_hi
    FROM f_allocation_claims a JOIN devices d ON d.device_id = a.device_id {join}
    WHERE {span_claims} AND {whole_gpu}
)
SELECT * FROM held WHERE k_lo <= k_hi AND namespace IS NOT NULL AND wname IS NOT NULL
"""
"""The span's claims of whole GPUs held exclusively by a named workload (a row without a namespace is no
workload's), with the first and last of their sample times in the span (``k_lo``, ``k_hi``)."""

_PODS = """
INSERT INTO part_placement_pods
SELECT $part_id, namespace, kind, wname, pod, min(gpu_uuid), max(gpu_uuid)
FROM an_seen_claims WHERE pod IS NOT NULL GROUP BY namespace, kind, wname, pod
"""

_CANDIDATES = """
CREATE OR REPLACE TEMP TABLE an_seen_owners AS
SELECT DISTINCT namespace, kind, wname FROM part_placement_pods
WHERE part_id = $part_id AND (gpu_lo <> gpu_hi OR list_contains($gang_kinds, kind))
"""
"""Owners that may be multi-device from what this part holds. An owner whose pods here are all single-GPU and
of no gang kind is left out: it is multi-device only if a pod of it in another node range held 2+ GPUs,
which the merge sees in the pods and says (:func:`incomplete_owners`)."""

_CANDIDATE_CLAIMS = "an_seen_claims c SEMI JOIN an_seen_owners USING (namespace, kind, wname)"

_CLAIMED_TIMES = f"""
SELECT namespace, kind, wname, t0 + step_us * k AS t, tenant, h, ge
FROM (SELECT c.*, unnest(range(k_lo, k_hi + 1)) AS k FROM {_CANDIDATE_CLAIMS})
"""  # noqa: S608 - constant fragments
"""A row per candidate claim and sample time in the span."""

_TIMES = """
INSERT INTO part_placement_times
SELECT $part_id, namespace, kind, wname, make_timestamp(t) AS ts, any_value(tenant), sum(h), count(*), sum(ge)
FROM ({rows})
GROUP BY namespace, kind, wname, t
"""
"""Per candidate owner and sample time: its key (the hashes of its distinct pairs, a row without a pod name
among them, as it counts for its owner), its distinct pairs and its GE (every row). ``{rows}`` has one row
per pair and time: the claimed times themselves when no two claims of one owner hold the same pair at once
(:data:`_PAIR_TWICE`), else :data:`_PER_PAIR` of them (two containers of a pod on one GPU, say)."""

_PER_PAIR = f"""
SELECT namespace, kind, wname, t, any_value(tenant) AS tenant, h, sum(ge) AS ge
FROM ({_CLAIMED_TIMES}) GROUP BY namespace, kind, wname, t, h
"""  # noqa: S608 - constant fragments
"""The claimed times grouped per pair (each pair once per time, its rows' GE summed)."""

_PAIR_TWICE = f"""
SELECT EXISTS (
    SELECT 1 FROM (
        SELECT t0 + step_us * k_lo AS first_t,
               max(t0 + step_us * k_hi) OVER (PARTITION BY namespace, kind, wname, h ORDER BY t0 + step_us * k_lo
                                              ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before_t
        FROM {_CANDIDATE_CLAIMS}
    ) WHERE before_t >= first_t
)
"""  # noqa: S608 - constant fragments
"""Whether two claims of one candidate owner and pair overlap in time (a claim begins before an earlier one of
the same pair ends): only then can a pair have two rows at one sample time. A few claims per pod and day are
read, not their times; at 100,000 GPUs the per-time grouping without it is 0.1-0.2x the time of grouping per
pair first, and far less memory."""

_RUNS = f"""
INSERT INTO part_placement_runs
SELECT $part_id, namespace, kind, wname, pod, gpu_uuid, make_timestamp(t0 + step_us * k_lo),
       make_timestamp(t0 + step_us * k_hi), CASE WHEN k_lo = k_hi THEN 0 ELSE step_us END
FROM {_CANDIDATE_CLAIMS}
WHERE pod IS NOT NULL
"""  # noqa: S608 - constant fragments
"""The candidate owners' claims in the span, as runs of (pod, GPU) pairs (a row without a pod name lists no pair)."""


def insert_seen(con: duckdb.DuckDBPyConnection, part_id: str, window: Window, settings: TopologySettings) -> None:
    """Write a part's ``part_placement_pods``, ``_times`` and ``_runs`` (the caller holds the transaction)."""
    group_kinds = sorted(GROUP_KINDS)
    gangs = con.execute(f"SELECT EXISTS ({GANGS})", {"end": window.end, "group_kinds": group_kinds}).fetchone()  # noqa: S608
    owner, join = _OWNER if gangs and gangs[0] else _OWNER_NO_GANGS
    con.execute(_CLAIMS.format(gangs=GANGS, owner=owner, join=join, whole_gpu=WHOLE_GPU, span_claims=SPAN_CLAIMS),
                {"start": window.start, "end": window.end, "group_kinds": group_kinds})
    try:
        con.execute(_PODS, {"part_id": part_id})
        con.execute(_CANDIDATES, {"part_id": part_id, "gang_kinds": sorted(settings.gang_kinds)})
        twice = con.execute(_PAIR_TWICE).fetchone()
        times = _TIMES.format(rows=_PER_PAIR if twice and twice[0] else _CLAIMED_TIMES)
        for statement in (times, _RUNS):
            con.execute(statement, {"part_id": part_id})
    finally:
        con.execute("DROP TABLE IF EXISTS an_seen_owners")
        con.execute("DROP TABLE an_seen_claims")


MERGED_OWNERS = """
CREATE OR REPLACE TEMP TABLE an_placement_owners AS
WITH parts AS (SELECT part_id, part_start::DATE AS day FROM analysis_parts WHERE list_contains($ids, part_id)),
pods AS (SELECT p.part_id, p.day, x.namespace, x.kind, x.wname, x.pod, x.gpu_lo, x.gpu_hi
         FROM part_placement_pods x JOIN parts p USING (part_id)),
multi AS (  -- owners with a pod that held 2+ whole GPUs in the day (over its node ranges)
    SELECT DISTINCT day, namespace, kind, wname FROM pods
    GROUP BY day, namespace, kind, wname, pod HAVING min(gpu_lo) <> max(gpu_hi)
)
SELECT DISTINCT part_id, namespace, kind, wname FROM pods WHERE list_contains($gang_kinds, kind)
UNION
SELECT DISTINCT part_id, namespace, kind, wname FROM pods SEMI JOIN multi USING (day, namespace, kind, wname)
"""
"""Per part of ``$ids``, the owners multi-device in its day: a gang kind (``$gang_kinds``), or an owner with a
pod that held 2+ whole GPUs in the day (in any of its node ranges)."""

MERGED_TIMES = """
CREATE OR REPLACE TEMP TABLE an_placement_times AS
SELECT t.namespace, t.kind, t.wname, t.ts, any_value(t.tenant) AS tenant, sum(t.sig) AS sig, sum(t.pairs) AS pairs,
       sum(t.ge) AS ge
FROM part_placement_times t SEMI JOIN an_placement_owners o USING (part_id, namespace, kind, wname)
GROUP BY t.namespace, t.kind, t.wname, t.ts  -- a sample time is in one day: over that day's node ranges
HAVING sum(t.pairs) >= 2
"""
"""``an_placement_times``: per multi-device owner and sample time of the window's parts, its set's key (``sig``),
distinct pairs and GE."""

MERGED_RUNS = """
CREATE OR REPLACE TEMP TABLE an_placement_runs AS
SELECT r.namespace, r.kind, r.wname, r.pod, r.gpu_uuid, r.from_ts, r.to_ts, r.step_us
FROM part_placement_runs r SEMI JOIN an_placement_owners o USING (part_id, namespace, kind, wname)
"""
"""``an_placement_runs``: the runs of (pod, GPU) pairs of the same owners and parts."""


def merge_seen(con: duckdb.DuckDBPyConnection, part_ids: list[str], gang_kinds: tuple[str, ...]) -> None:
    """``an_placement_times`` and ``an_placement_runs`` of the parts ``part_ids``."""
    con.execute(MERGED_OWNERS, {"ids": part_ids, "gang_kinds": sorted(gang_kinds)})
    try:
        con.execute(MERGED_TIMES)
        con.execute(MERGED_RUNS)
    finally:
        con.execute("DROP TABLE an_placement_owners")


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
