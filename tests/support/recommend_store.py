"""Tiny hand-built stores for the rightsizing and quota tests (real DuckDB, the real schema)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path

import duckdb

from collector.schema import create_schema
from gpulens.core.mig_catalog import MIB, model_by_name
from tests.support.bulk_insert import insert_rows

GIB = 1024**3
T0 = datetime(2026, 11, 1)


class StoreBuilder:
    """Builds a store row by row in memory and bulk-inserts it on ``save()``."""

    def __init__(self, path: Path, *, start: datetime = T0, step: timedelta = timedelta(minutes=5)) -> None:
        self.path = path
        self.start = start
        self.step = step
        self.rows: dict[str, list[dict[str, object]]] = {}
        self._devices: dict[str, tuple[str, str, float]] = {}

    def ts(self, i: int) -> datetime:
        return self.start + i * self.step

    def _add(self, table: str, **row: object) -> None:
        self.rows.setdefault(table, []).append(row)

    def device(self, device_id: str, model: str, profile: str = "gpu", *, node: str = "node-1") -> str:
        m = model_by_name(model)
        if profile == "gpu":
            ge, mem, kind = 1.0, m.memory_bytes, "gpu"
        else:
            p = m.profile(profile)
            ge, mem, kind = p.gpu_equivalents, p.memory_bytes, "mig"
        gpu_uuid = f"GPU-{device_id}"
        self._devices[device_id] = (gpu_uuid, node, ge)
        self._add("devices", device_id=device_id, gpu_uuid=gpu_uuid, node=node, gpu_model=m.short_name, kind=kind,
                  profile=profile, gpu_equivalents=ge, memory_total_bytes=mem,
                  sharing_mode="exclusive" if profile == "gpu" else "mig")
        return device_id

    def workload(
        self,
        namespace: str,
        kind: str | None,
        name: str | None,
        pods: Mapping[str, Sequence[str]],
        *,
        samples: int,
        activity: Callable[[int], float | None],
        memory: Callable[[int], int],
        tenant: str | None = None,
        signal: Callable[[int], str | None] = lambda i: None,
    ) -> None:
        """``pods`` maps pod name -> device ids it holds; every device reads ``activity(i)``, ``memory(i)``
        (``signal(i)`` names the metric the activity came from; ``None``: not recorded)."""
        for i in range(samples):
            ts = self.ts(i)
            for pod, devices in pods.items():
                for dev in devices:
                    gpu_uuid, node, ge = self._devices[dev]
                    self._add("allocations", ts=ts, node=node, gpu_uuid=gpu_uuid, device_id=dev,
                              namespace=namespace, pod=pod, container="main", tenant=tenant or namespace,
                              sharing_mode=None, gpu_equivalents=ge, workload_kind=kind, workload_name=name,
                              source="test")
                    self._add("device_samples", ts=ts, node=node, gpu_uuid=gpu_uuid, device_id=dev,
                              activity_ratio=activity(i), memory_used_bytes=memory(i), memory_total_bytes=None,
                              source="test", activity_signal=signal(i))

    def quota(
        self,
        kind: str,
        name: str,
        resource: str,
        *,
        nominal: float,
        usage: Sequence[float | None],
        namespace: str = "",
        flavor: str = "",
        tenant: str | None = None,
        borrowing_limit: float | None = None,
        lending_limit: float | None = None,
        annotations: Mapping[str, str] | None = None,
        first: int = 0,
    ) -> None:
        """Snapshots at steps ``first``, ``first + 1``, ... (a negative ``first`` starts before ``start``)."""
        for i, used in enumerate(usage, start=first):
            self._add("quota_snapshots", ts=self.ts(i), object_kind=kind, object_namespace=namespace,
                      object_name=name, tenant=tenant, flavor=flavor, resource=resource, nominal_quota=nominal,
                      borrowing_limit=borrowing_limit, lending_limit=lending_limit, usage=used,
                      annotations=json.dumps(dict(annotations or {})), source="test")

    def pending(
        self, tenant: str, resource: str, quantities: Mapping[int, float], *, cluster_queue: str = "",
        namespace: str = "", flavor: str = "", profile: str = "gpu",
    ) -> None:
        for i, qty in quantities.items():
            self._add("pending_demand", ts=self.ts(i), tenant=tenant, cluster_queue=cluster_queue,
                      namespace=namespace, flavor=flavor, resource=resource, profile=profile, gpu_model="",
                      quantity=qty, workloads=1, source="test")

    def save(self) -> Path:
        with duckdb.connect(str(self.path)) as con:
            create_schema(con)
            for table, rows in self.rows.items():
                cols = list(rows[0])
                insert_rows(con, table, cols, [tuple(r[c] for c in cols) for r in rows])
        return self.path


def mib(n: float) -> int:
    return int(n * MIB)


def gib(n: float) -> int:
    return int(n * GIB)
