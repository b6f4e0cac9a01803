"""Each distinct placement of a workload over a window, rebuilt from its runs of (pod, GPU) pairs.

The window's parts give, per multi-device workload, the key of the set it held at each sample time
(``an_placement_times``) and its claims of whole GPUs as runs (``an_placement_runs``: pod, GPU, first and
last sample time, step). A placement is a distinct key: its samples, GE-samples, first and last time
come from the times; its pairs are the runs that sample its first time. A workload's runs are merged into
intervals per pair, pod and domain of each topology level, and counted at the placements' first times at
once (numpy), so each placement is measured without its pairs ever being listed; the workload's main
placement (held longest, then the earliest) has its pairs read at its first time. A run samples only the
times of its step from its first time: where a workload's runs are not all on one grid, or a placement
starts off it, that placement's pairs are picked one by one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

import duckdb
import numpy as np

from analytics.placement.fleet import as_fleet
from analytics.placement.spread import LEVELS, GpuPlace


@dataclass(frozen=True)
class Held:
    """What a placement held at its first time: its pairs, pods and, per level, the domains they touch."""

    devices: int
    """Its (pod, GPU) pairs."""
    pods: int
    smallest_pod: int
    """GPUs of its smallest pod (0 without pods)."""
    spanned: tuple[int | None, ...]
    """Per level (``LEVELS``): distinct domains of its GPUs; None where one of them has no key there."""


@dataclass(frozen=True)
class Seen:
    """One distinct placement of one workload in the window."""

    tenant: str
    samples: int
    ge_samples: float
    first_ts: datetime
    last_ts: datetime
    held: Held


@dataclass(frozen=True)
class WorkloadSeen:
    """A multi-device workload's placements in the window, the main one (held longest, then the earliest) first."""

    tenant: str
    namespace: str
    kind: str
    workload: str
    placements: tuple[Seen, ...]
    main_pairs: tuple[tuple[str, str], ...]
    """The main placement's (pod, GPU) pairs, sorted."""


@dataclass(frozen=True)
class _Runs:
    """A workload's runs as arrays: pair code, first and last sample time (epoch microseconds), step."""

    pair: np.ndarray
    start: np.ndarray
    end: np.ndarray
    step: np.ndarray

    def sampling(self, t: int) -> np.ndarray:
        """Which runs sample time ``t``."""
        inside = (self.start <= t) & (t <= self.end)
        return inside & ((self.step == 0) | ((t - self.start) % np.maximum(self.step, 1) == 0))

    def grid(self) -> tuple[int, int] | None:
        """(step, phase) every run with a step shares, (0, 0) when none has one; None for several grids."""
        stepped = self.step > 0
        grids = set(zip(self.step[stepped].tolist(), (self.start[stepped] % self.step[stepped]).tolist(), strict=True))
        return (0, 0) if not grids else next(iter(grids)) if len(grids) == 1 else None


def _union(keys: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per key, its intervals ``[start, end)`` merged where they overlap or touch: (key, start, end) of each."""
    order = np.lexsort((start, keys))
    k, s, e = keys[order], start[order], end[order]
    ends, rank = np.unique(e, return_inverse=True)  # ranks, so that a key's offset cannot overflow
    group = np.cumsum(np.append(False, k[1:] != k[:-1])) if len(k) else k
    reach = ends[np.maximum.accumulate(rank.reshape(-1) + group * len(ends)) - group * len(ends)] if len(k) else e
    # the running end within each key (keys ascending: each key's offset is above every earlier one's)
    first = np.ones(len(k), dtype=bool)
    first[1:] = (k[1:] != k[:-1]) | (s[1:] > reach[:-1])
    at = np.flatnonzero(first)
    last = np.append(at[1:] - 1, len(k) - 1) if len(at) else at
    return k[at], s[at], reach[last]


def _covering(start: np.ndarray, end: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Per time, how many intervals ``[start, end)`` hold it."""
    return np.searchsorted(np.sort(start), times, side="right") - np.searchsorted(np.sort(end), times, side="right")


def _held_at(runs: _Runs, times: np.ndarray, chains: np.ndarray, pod_of: np.ndarray) -> list[Held]:
    """What the runs held at each of ``times``, every run taken to sample every time inside it."""
    if not len(times):
        return []
    t = times
    pair, begin, stop = _union(runs.pair, runs.start, runs.end + 1)  # a pair held in several runs: once
    devices = _covering(begin, stop, t)
    pod, pod_begin, pod_stop = _union(pod_of[pair], begin, stop)
    pods = _covering(pod_begin, pod_stop, t)
    smallest = _smallest_pod(pod_of[pair], begin, stop, t)
    spanned: list[np.ndarray] = []
    for level in range(len(LEVELS)):
        code = chains[pair, level]
        known = code >= 0
        _, d_begin, d_stop = _union(code[known], begin[known], stop[known])
        unknown = _covering(begin[~known], stop[~known], t)
        spanned.append(np.where(unknown > 0, -1, _covering(d_begin, d_stop, t)))
    levels = np.stack(spanned, axis=1) if spanned else np.zeros((len(t), 0), dtype=np.int64)
    return [Held(int(d), int(p), int(m), tuple(None if v < 0 else int(v) for v in row))
            for d, p, m, row in zip(devices.tolist(), pods.tolist(), smallest.tolist(), levels, strict=True)]


def _smallest_pod(pod: np.ndarray, begin: np.ndarray, stop: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Per time, the GPUs of the smallest pod then (0 without pods): each pod's size is the distinct pairs of it
    held, a step function over its pairs' intervals."""
    n = len(pod)
    when = np.concatenate([begin, stop])
    who = np.concatenate([pod, pod])
    sign = np.concatenate([np.ones(n, dtype=np.int64), -np.ones(n, dtype=np.int64)])
    order = np.lexsort((when, who))
    when, who, sign = when[order], who[order], sign[order]
    size = np.cumsum(sign)  # each pod's events add up to 0, so the sum restarts at each pod
    # each pod's size from each event to its next (the last event of a pod brings it to 0)
    nxt = np.append(when[1:], when[-1:]) if len(when) else when
    same = np.append(who[1:] == who[:-1], False) if len(who) else who.astype(bool)
    live = same & (size > 0) & (nxt > when)
    out = np.zeros(len(times), dtype=np.int64)
    for value in sorted(set(size[live].tolist()), reverse=True):  # the smallest size held wins
        chosen = live & (size == value)
        out[_covering(when[chosen], nxt[chosen], times) > 0] = value
    return out


def _held_of(pairs: np.ndarray, chains: np.ndarray, pod_of: np.ndarray) -> Held:
    """What a set of pair codes holds (each counted once)."""
    distinct = np.unique(pairs)
    sizes = Counter(pod_of[distinct].tolist())
    spanned = tuple(None if (chains[distinct, level] < 0).any() else len(set(chains[distinct, level].tolist()))
                    for level in range(len(LEVELS)))
    return Held(len(distinct), len(sizes), min(sizes.values(), default=0), spanned)


def _replay(runs: _Runs, times: list[int], chains: np.ndarray, pod_of: np.ndarray) -> list[Held]:
    """What the runs held at each of ``times``.

    Where every run is on one grid and a time is on it, each run inside the time samples it: those times are
    counted on the runs' intervals at once. Any other time's runs are picked one by one."""
    grid = runs.grid()
    at = np.asarray(times, dtype=np.int64)
    regular = np.zeros(len(at), dtype=bool) if grid is None else (
        np.ones(len(at), dtype=bool) if grid[0] == 0 else at % grid[0] == grid[1])
    held: list[Held | None] = [None] * len(at)
    for i, h in zip(np.flatnonzero(regular).tolist(), _held_at(runs, at[regular], chains, pod_of), strict=True):
        held[i] = h
    for i in np.flatnonzero(~regular).tolist():
        held[i] = _held_of(runs.pair[runs.sampling(int(at[i]))], chains, pod_of)
    return [h for h in held if h is not None]


def _us(ts: datetime) -> int:
    return (ts - _EPOCH) // _MICRO


_EPOCH = datetime(1970, 1, 1)
_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1) - _EPOCH


_RUNS = """
WITH owners AS (SELECT namespace, kind, wname, row_number() OVER (ORDER BY namespace, kind, wname) - 1 AS oid
                FROM (SELECT DISTINCT namespace, kind, wname FROM an_placement_runs)),
gpus AS (SELECT gpu_uuid, row_number() OVER (ORDER BY gpu_uuid) - 1 AS gid
         FROM (SELECT DISTINCT gpu_uuid FROM an_placement_runs))
SELECT {columns}
"""
_CODED = _RUNS.format(columns="""
    o.oid, dense_rank() OVER (PARTITION BY o.oid ORDER BY r.pod, r.gpu_uuid) - 1 AS pair,
    dense_rank() OVER (PARTITION BY o.oid ORDER BY r.pod) - 1 AS pod, g.gid, epoch_us(r.from_ts) AS t0,
    epoch_us(r.to_ts) AS t1, r.step_us
FROM an_placement_runs r JOIN owners o USING (namespace, kind, wname) JOIN gpus g USING (gpu_uuid)
ORDER BY o.oid""")
"""Every run with integer codes: its owner, its pair and pod within the owner, its GPU."""

_MAIN_PAIRS = """
SELECT r.namespace, r.kind, r.wname, r.pod, r.gpu_uuid
FROM an_placement_runs r
JOIN (SELECT unnest($ns) AS ns, unnest($kinds) AS kind, unnest($names) AS wname, unnest($times)::TIMESTAMP AS t) m
  ON m.ns = r.namespace AND m.kind = r.kind AND m.wname = r.wname
WHERE r.from_ts <= m.t AND m.t <= r.to_ts
  AND (r.step_us = 0 OR (epoch_us(m.t) - epoch_us(r.from_ts)) % r.step_us = 0)
GROUP BY ALL ORDER BY ALL
"""
"""The (pod, GPU) pairs each workload's runs sample at the given time (its main placement's first)."""


def workloads_seen(con: duckdb.DuckDBPyConnection, places: Mapping[str, GpuPlace]) -> list[WorkloadSeen]:
    """Every multi-device workload of ``an_placement_times`` / ``an_placement_runs``, its placements measured
    with ``places`` (a GPU it does not describe has no key at any level). A placement of fewer than two
    listed pairs (rows without a pod name) is none."""
    keyed: dict[tuple[str, str, str], list[tuple[int, float, datetime, datetime, str]]] = defaultdict(list)
    for ns, kind, wname, tenant, samples, ge, first, last in con.execute(
        """SELECT namespace, kind, wname, any_value(tenant), count(*), sum(ge)::DOUBLE, min(ts), max(ts)
           FROM an_placement_times GROUP BY namespace, kind, wname, sig"""
    ).fetchall():
        keyed[(ns, kind, wname)].append((int(samples), float(ge), first, last, str(tenant)))
    owners = [tuple(r) for r in con.execute(_RUNS.format(columns="namespace, kind, wname FROM owners ORDER BY oid")).fetchall()]
    gpus = [r[0] for r in con.execute(_RUNS.format(columns="gpu_uuid FROM gpus ORDER BY gid")).fetchall()]
    coded = {k: np.asarray(v, dtype=np.int64) for k, v in con.execute(_CODED).fetchnumpy().items()}
    chains = as_fleet(places).chain_codes(gpus)
    bounds = np.searchsorted(coded["oid"], np.arange(len(owners) + 1))
    runs_at = {owner: slice(int(bounds[i]), int(bounds[i + 1])) for i, owner in enumerate(owners)}
    measured: list[tuple[tuple[str, str, str], list[Seen]]] = []
    for owner in sorted(keyed):
        at = runs_at.get(owner, slice(0, 0))  # type: ignore[arg-type]
        pair, pod, gid = coded["pair"][at], coded["pod"][at], coded["gid"][at]
        pairs = int(pair.max()) + 1 if len(pair) else 0
        pod_of, gpu_of = np.zeros(pairs, dtype=np.int64), np.zeros(pairs, dtype=np.int64)
        pod_of[pair], gpu_of[pair] = pod, gid
        runs = _Runs(pair, coded["t0"][at], coded["t1"][at], coded["step_us"][at])
        seen = _measured(sorted(keyed[owner], key=lambda p: (-p[0], p[2])), runs, chains[gpu_of], pod_of)
        if seen:
            measured.append((owner, seen))
    main: dict[tuple[str, str, str], list[tuple[str, str]]] = defaultdict(list)
    for ns, kind, wname, pod_name, gpu in con.execute(_MAIN_PAIRS, {
        "ns": [o[0] for o, _ in measured], "kinds": [o[1] for o, _ in measured], "names": [o[2] for o, _ in measured],
        "times": [seen[0].first_ts for _, seen in measured]}).fetchall():
        main[(ns, kind, wname)].append((pod_name, gpu))
    return [WorkloadSeen(seen[0].tenant, *owner, tuple(seen), tuple(main[owner])) for owner, seen in measured]


def _measured(placements: list[tuple[int, float, datetime, datetime, str]], runs: _Runs,
              chains: np.ndarray, pod_of: np.ndarray) -> list[Seen]:
    """The placements (longest held first) with what they held, less those of fewer than two pairs."""
    firsts = sorted({_us(p[2]) for p in placements})
    at = dict(zip(firsts, _replay(runs, firsts, chains, pod_of), strict=True))
    seen = [Seen(tenant, s, ge, first, last, at[_us(first)]) for s, ge, first, last, tenant in placements]
    return [p for p in seen if p.held.devices >= 2]


def first_pairs(rows: Iterable[tuple[str, str]]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The GPUs of sorted (pod, GPU) pairs grouped by pod, and each pod's GPUs in that order."""
    gpus: list[str] = []
    sizes: list[int] = []
    last: object = object()
    for pod, gpu in rows:
        if pod == last:
            sizes[-1] += 1
        else:
            sizes.append(1)
            last = pod
        gpus.append(gpu)
    return tuple(gpus), tuple(sizes)
