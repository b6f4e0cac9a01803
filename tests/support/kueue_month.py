"""A month of per-minute Kueue ClusterQueue metrics for 16 tenants, stored through the real collector mapping.

Shaped like the tenant traces of issue 10: bursty on/off demand in whole workloads, queues that saturate
their quota and queue work behind it, scrape gaps (0.3 % of minutes lost, one 2-hour outage), and two
Kueue versions: ``new`` exports ``kueue_cluster_queue_resource_pending`` (Kueue >= 0.18), ``old`` only
``kueue_pending_workloads``. The long frame goes through :func:`collector.mapping.map_kueue` and
:meth:`collector.store.Store.ingest_window`, exactly as a Prometheus collection would store it.

Named queues (the others are random shapes):
- ``busy``: quota 48; pending work in ~36 % of minutes over the month (P95 demand ~72) but quiet for
  the last 4 days: a short window sees only the quiet days.
- ``recently-quiet``: quota 32; busy with pending work for the first 14 days, quiet for the last 17.
- ``steady-low``: quota 40; 6-14 GPUs in use all month, nothing pending: a cut is right.
- ``gang``: quota 24; 6-12 in use while 16-GPU workloads wait as inadmissible half of the time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from collector.mapping import map_kueue
from collector.store import Store

T0 = datetime(2026, 3, 1, tzinfo=UTC)
DAYS = 31
MINUTES = DAYS * 1440
END = T0 + timedelta(days=DAYS)
RESOURCE = "nvidia.com/gpu"
FLAVOR = "h100"


@dataclass(frozen=True)
class Queue:
    name: str
    quota: int
    usage: np.ndarray
    pending: np.ndarray
    """GPUs requested by waiting workloads, per minute."""
    waiting: np.ndarray
    """Workloads waiting, per minute."""


def _episodes(rng: np.random.Generator, n: int, on_mean: float, off_mean: float) -> np.ndarray:
    """An on/off mask with exponential episode lengths (minutes)."""
    mask = np.zeros(n, dtype=bool)
    i, on = 0, bool(rng.random() < on_mean / (on_mean + off_mean))
    while i < n:
        length = max(1, int(rng.exponential(on_mean if on else off_mean)))
        mask[i:i + length] = on
        i += length
        on = not on
    return mask


def _walk(rng: np.random.Generator, n: int, low: int, high: int, step: int = 1) -> np.ndarray:
    """Integer usage that moves by whole workloads, a few times an hour, within [low, high]."""
    moves = rng.choice([-step, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, step], size=n)
    out = np.empty(n, dtype=np.int64)
    x = (low + high) // 2
    for i, m in enumerate(moves):
        x = min(high, max(low, x + m))
        out[i] = x
    return out


def queues(seed: int = 10) -> list[Queue]:
    rng = np.random.default_rng(seed)
    n = MINUTES
    day = np.arange(n) // 1440
    out = []

    on = _episodes(rng, n, 120, 170) & (day < DAYS - 4)
    usage = np.where(on, 48 - rng.integers(0, 5, n), _walk(rng, n, 10, 34, 2))
    usage[day >= DAYS - 4] = _walk(rng, int((day >= DAYS - 4).sum()), 12, 28, 2)
    pending = np.where(on, 4 * rng.integers(2, 8, n), 0)
    out.append(Queue("busy", 48, usage, pending, -(-pending // 8)))

    on = _episodes(rng, n, 90, 130) & (day < 14)
    usage = np.where(on, 32 - rng.integers(0, 4, n), _walk(rng, n, 4, 10))
    pending = np.where(on, 2 * rng.integers(2, 7, n), 0)
    out.append(Queue("recently-quiet", 32, usage, pending, -(-pending // 4)))

    out.append(Queue("steady-low", 40, _walk(rng, n, 6, 14), np.zeros(n, np.int64), np.zeros(n, np.int64)))

    gang = _episodes(rng, n, 240, 240)
    out.append(Queue("gang", 24, _walk(rng, n, 6, 12, 2), np.where(gang, 16, 0), gang.astype(np.int64)))

    for k in range(12):
        quota = int(rng.choice([8, 16, 24, 32, 48, 64]))
        lo, hi = sorted(int(x) for x in rng.integers(0, quota + 1, 2))
        usage = _walk(rng, n, lo, max(hi, lo + 1), max(1, quota // 16))
        on = _episodes(rng, n, 60, float(rng.choice([400, 2000, 1e9])))
        pending = np.where(on & (usage >= hi), int(rng.integers(1, 9)), 0)
        out.append(Queue(f"tenant-{k:02d}", quota, usage, pending, (pending > 0).astype(np.int64)))
    return out


def kept_minutes(seed: int = 10) -> np.ndarray:
    """Minutes a scrape returned (0.3 % lost at random, a 2-hour outage on day 10)."""
    rng = np.random.default_rng(seed + 1)
    keep = rng.random(MINUTES) >= 0.003
    keep[10 * 1440 + 600:10 * 1440 + 720] = False
    return keep


def long_frame(version: str, seed: int = 10) -> pl.DataFrame:
    """Kueue's series as a Prometheus range query returns them (one row per sample)."""
    keep = kept_minutes(seed)
    ts_ms = (int(T0.timestamp()) + np.arange(MINUTES)[keep] * 60) * 1000
    parts = []
    for q in queues(seed):
        def series(metric: str, values: np.ndarray, **labels: str) -> pl.DataFrame:
            return pl.DataFrame({"metric": metric, "value": values[keep].astype(float), "ts_ms": ts_ms}).with_columns(
                **{k: pl.lit(v) for k, v in labels.items()}
            )

        cq = {"cluster_queue": q.name, "cohort": "ai-factory", "flavor": FLAVOR, "resource": RESOURCE}
        parts.append(series("kueue_cluster_queue_nominal_quota", np.full(MINUTES, q.quota), **cq))
        parts.append(series("kueue_cluster_queue_resource_usage", q.usage, **cq))
        inadmissible = q.waiting // 2
        parts.append(series("kueue_pending_workloads", q.waiting - inadmissible, cluster_queue=q.name, status="active"))
        parts.append(series("kueue_pending_workloads", inadmissible, cluster_queue=q.name, status="inadmissible"))
        if version == "new":
            parts.append(series("kueue_cluster_queue_resource_pending", q.pending, **cq))
    return pl.concat(parts, how="diagonal").with_columns(pl.col("ts_ms").cast(pl.Int64))


def build_store(path: Path, version: str, seed: int = 10) -> Path:
    """Store the month through the collector's Kueue mapping, one ingest window per day."""
    long = long_frame(version, seed)
    with Store(str(path)) as store:
        for d in range(DAYS):
            lo = int((T0 + timedelta(days=d)).timestamp() * 1000)
            hi = lo + 86_400_000
            frames = map_kueue(long.filter(pl.col("ts_ms").is_between(lo, hi, closed="left")), "prometheus")
            store.ingest_window("prometheus", lo / 1000, hi / 1000, frames, now=hi / 1000)
    return path
