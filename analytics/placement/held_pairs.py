"""Each distinct placement of a workload over a window, rebuilt from its runs of (pod, GPU) pairs.

The window's parts give, per multi-device workload, the key of the set it held at each sample time
(``an_placement_times``) and its claims of whole GPUs as runs (``an_placement_runs``: pod, GPU, first and
last sample time, step). A placement is a distinct key: its samples, GE-samples, first and last time
come from the times; its pairs are the runs that sample its first time. Replaying a workload's runs in
time order (a pair enters at its run's first time and leaves after its last) keeps, per topology level,
how many domains the pairs present touch, so each placement is measured where it starts without its
pairs ever being listed; the workload's main placement (held longest, then the earliest) is the one
whose pairs are kept. A run samples only the times of its step from its first time: where a workload's
runs are not all on one grid, or a placement starts off it, that placement's pairs are picked one by one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import duckdb

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


class _Sets:
    """The pairs present, counted so that a pair entering or leaving updates every level at once."""

    def __init__(self, chains: Sequence[tuple[int, ...]], pod_of: Sequence[int]) -> None:
        self._chains, self._pod_of = chains, pod_of
        self._pair_n: dict[int, int] = {}
        self._domain_n: list[dict[int, int]] = [{} for _ in LEVELS]
        self._spanned = [0] * len(LEVELS)
        self._unknown = [0] * len(LEVELS)
        self._pod_n: dict[int, int] = {}
        self._sizes: Counter[int] = Counter()

    def add(self, pair: int) -> None:
        n = self._pair_n.get(pair, 0)
        self._pair_n[pair] = n + 1
        if n == 0:
            self._enter(pair, 1)

    def remove(self, pair: int) -> None:
        n = self._pair_n[pair] - 1
        if n:
            self._pair_n[pair] = n
        else:
            del self._pair_n[pair]
            self._enter(pair, -1)

    def _enter(self, pair: int, sign: int) -> None:
        for level, code in enumerate(self._chains[pair]):
            if code < 0:
                self._unknown[level] += sign
                continue
            counts = self._domain_n[level]
            c = counts.get(code, 0) + sign
            if c:
                counts[code] = c
            else:
                del counts[code]
            if (c == 1 and sign > 0) or c == 0:
                self._spanned[level] += sign
        pod = self._pod_of[pair]
        size = self._pod_n.get(pod, 0)
        if size:
            self._sizes[size] -= 1
            if not self._sizes[size]:
                del self._sizes[size]
        if size + sign:
            self._pod_n[pod] = size + sign
            self._sizes[size + sign] += 1
        else:
            del self._pod_n[pod]

    def held(self) -> Held:
        spanned = tuple(None if u else s for s, u in zip(self._spanned, self._unknown, strict=True))
        return Held(len(self._pair_n), len(self._pod_n), min(self._sizes, default=0), spanned)

    def pairs(self) -> list[int]:
        return list(self._pair_n)


@dataclass(frozen=True)
class _Run:
    pair: int
    start: int
    """First sample time, epoch microseconds."""
    end: int
    step: int

    def samples(self, t: int) -> bool:
        return self.start <= t <= self.end and (self.step == 0 or (t - self.start) % self.step == 0)


def _replay(runs: list[_Run], times: list[int], chains: Sequence[tuple[int, ...]], pod_of: Sequence[int],
            keep: int | None) -> tuple[list[Held], list[int]]:
    """What the runs held at each of ``times`` (ascending), and the pairs held at ``keep`` (one of them)."""
    grids = {(r.step, r.start % r.step) for r in runs if r.step}
    step, phase = next(iter(grids)) if len(grids) == 1 else (0, 0)
    events = sorted([(r.start, 1, i) for i, r in enumerate(runs)] + [(r.end + 1, -1, i) for i, r in enumerate(runs)])
    sets, active = _Sets(chains, pod_of), set()
    out, kept, e = [], [], 0
    for t in times:
        while e < len(events) and events[e][0] <= t:
            _, sign, i = events[e]
            if sign > 0:
                sets.add(runs[i].pair)
                active.add(i)
            else:
                sets.remove(runs[i].pair)
                active.discard(i)
            e += 1
        if len(grids) <= 1 and (not grids or t % step == phase):
            at = sets  # every active run samples t
        else:  # runs on other grids, or t off the grid: only the runs that sample t
            at = _Sets(chains, pod_of)
            for i in active:
                if runs[i].samples(t):
                    at.add(runs[i].pair)
        out.append(at.held())
        if t == keep:
            kept = at.pairs()
    return out, kept


def _us(ts: datetime) -> int:
    return (ts - _EPOCH) // _MICRO


_EPOCH = datetime(1970, 1, 1)
_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1) - _EPOCH


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
    runs_of: dict[tuple[str, str, str], list[tuple[str, str, int, int, int]]] = defaultdict(list)
    for ns, kind, wname, pod, gpu, start, end, step in con.execute(
        "SELECT namespace, kind, wname, pod, gpu_uuid, epoch_us(from_ts), epoch_us(to_ts), step_us FROM an_placement_runs"
    ).fetchall():
        runs_of[(ns, kind, wname)].append((pod, gpu, start, end, step))
    domains: list[dict[str, int]] = [{} for _ in LEVELS]
    unknown = tuple(-1 for _ in LEVELS)
    chain_of: dict[str, tuple[int, ...]] = {}
    out = []
    for owner in sorted(keyed):
        placements = sorted(keyed[owner], key=lambda p: (-p[0], p[2]))
        pair_code: dict[tuple[str, str], int] = {}
        pod_code: dict[str, int] = {}
        chains: list[tuple[int, ...]] = []
        pod_of: list[int] = []
        runs = []
        for pod, gpu, start, end, step in runs_of.get(owner, ()):
            code = pair_code.get((pod, gpu))
            if code is None:
                code = pair_code[(pod, gpu)] = len(chains)
                if gpu not in chain_of:
                    place = places.get(gpu)
                    chain_of[gpu] = unknown if place is None else tuple(
                        -1 if key is None else domains[i].setdefault(key, len(domains[i]))
                        for i, key in enumerate(place.chain))
                chains.append(chain_of[gpu])
                pod_of.append(pod_code.setdefault(pod, len(pod_code)))
            runs.append(_Run(code, start, end, step))
        seen, main = _measured(placements, runs, chains, pod_of)
        if not seen:
            continue
        names = list(pair_code)
        main_pairs = tuple(sorted(names[code] for code in main))
        out.append(WorkloadSeen(seen[0].tenant, *owner, tuple(seen), main_pairs))
    return out


def _measured(placements: list[tuple[int, float, datetime, datetime, str]], runs: list[_Run],
              chains: Sequence[tuple[int, ...]], pod_of: Sequence[int]) -> tuple[list[Seen], list[int]]:
    """The placements (longest held first) with what they held, less those of fewer than two pairs; and the
    first one's pairs."""
    firsts = sorted({_us(p[2]) for p in placements})
    held, kept = _replay(runs, firsts, chains, pod_of, _us(placements[0][2]))
    at = dict(zip(firsts, held, strict=True))
    seen = [Seen(tenant, s, ge, first, last, at[_us(first)]) for s, ge, first, last, tenant in placements]
    valid = [p for p in seen if p.held.devices >= 2]
    if valid and valid[0] is not seen[0]:  # the longest held lists fewer than two pairs: the next one's pairs
        _, kept = _replay(runs, [_us(valid[0].first_ts)], chains, pod_of, _us(valid[0].first_ts))
    return valid, kept


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
