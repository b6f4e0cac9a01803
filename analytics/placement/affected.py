"""GE-hours a workload held in placements that spanned more domains than needed, per level, for all its placements at once.

The same figures :func:`analytics.placement.spread` gives placement by placement (a level counts
for a placement when every GPU of it has a key there and the fleet's shapes give its fewest domains;
it is affected when it spans more domains than that), worked out as arrays: a workload's placements
share most of their (pod, GPU) pairs, so each distinct pair is split and placed once, and a placement
is a row of a placements x pairs matrix. The hours are added up in the placements' order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import chain

import numpy as np

from analytics.placement.spread import LEVELS, FleetShapes, GpuPlace, least_domains


def affected_hours(pairs: Sequence[Sequence[str]], ge_hours: Sequence[float], places: Mapping[str, GpuPlace],
                   fleet: FleetShapes) -> dict[str, float]:
    """Level -> GE-hours of the placements (their 'pod|GPU' pairs, distinct within each) spread worse there.

    A level where one of a placement's GPUs has no key (or ``places`` does not describe it) is not measured
    for that placement.
    """
    column = {item: n for n, item in enumerate(dict.fromkeys(chain.from_iterable(pairs)))}
    if not column:
        return {}
    devices = np.fromiter(map(len, pairs), dtype=np.int64, count=len(pairs))
    rows = np.repeat(np.arange(len(pairs)), devices)
    flat = np.fromiter(map(column.__getitem__, chain.from_iterable(pairs)), dtype=np.int64, count=len(rows))
    pod_code: dict[str, int] = {}
    gpu_code: dict[str, int] = {}
    pod_of, gpu_of = [], []
    for item in column:  # 'pod|gpu' split at the last |, once per distinct pair
        pod, _, gpu = item.rpartition("|")
        pod_of.append(pod_code.setdefault(pod, len(pod_code)))
        gpu_of.append(gpu_code.setdefault(gpu, len(gpu_code)))
    gpu_at = np.asarray(gpu_of, dtype=np.int64)[flat]  # per pair of every placement: its GPU
    held = [places.get(gpu) for gpu in gpu_code]  # a GPU not described has no key at any level
    per_pod = np.bincount(rows * len(pod_code) + np.asarray(pod_of, dtype=np.int64)[flat],
                          minlength=len(pairs) * len(pod_code)).reshape(len(pairs), len(pod_code))  # GPUs per pod
    pods = (per_pod > 0).sum(axis=1)
    smallest = np.where(per_pod > 0, per_pod, np.iinfo(np.int64).max).min(axis=1)
    out: dict[str, float] = {}
    for index, level in enumerate(LEVELS):
        spanned, known = _spanned([p.chain[index] if p is not None else None for p in held], gpu_at, rows, len(pairs))
        if not known.any():
            continue  # no placement measured at this level: the fleet's domains there are not asked for
        least = np.zeros(len(pairs), dtype=np.int64)
        least[known] = _least(level, devices[known], pods[known], smallest[known], fleet)
        worse = known & (least >= 1) & (least < spanned)
        if worse.any():
            total = 0.0
            for hours in np.asarray(ge_hours, dtype=object)[worse]:
                total += hours
            out[level] = total
    return out


def _any(rows: np.ndarray, flags: np.ndarray, n: int) -> np.ndarray:
    """Per row: does any of its pairs carry the flag."""
    return np.bincount(rows, weights=flags, minlength=n) > 0


def _spanned(keys: list[str | None], gpu_at: np.ndarray, rows: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per placement: distinct domains its GPUs' keys name, and whether every key is known."""
    code: dict[str, int] = {}
    codes = np.array([code.setdefault(k, len(code)) if k is not None else -1 for k in keys], dtype=np.int64)[gpu_at]
    unknown = codes < 0
    present = np.zeros((n, max(1, len(code))), dtype=bool)
    present[rows[~unknown], codes[~unknown]] = True
    return present.sum(axis=1), ~_any(rows, unknown, n)


def _least(level: str, devices: np.ndarray, pods: np.ndarray, smallest: np.ndarray, fleet: FleetShapes) -> np.ndarray:
    """Per placement: :func:`least_domains` at ``level`` (0 where the fleet gives none)."""
    key = (devices * (int(pods.max()) + 1) + pods) * (int(smallest.max()) + 1) + smallest  # one int per shape
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    values = [least_domains(level, int(devices[i]), int(pods[i]), int(smallest[i]), fleet) for i in first]
    return np.array([v if v is not None else 0 for v in values], dtype=np.int64)[inverse.reshape(-1)]
