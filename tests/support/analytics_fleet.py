"""Tiny hand-built fleets for the analytics tests, written straight into a real DuckDB store."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path

import duckdb

from analytics.prices import Price, record_price
from collector.schema import create_schema
from gpulens.core.mig_catalog import short_model
from tests.support.bulk_insert import insert_rows

T0 = datetime(2026, 1, 5, 0, 0)
GIB = 1024**3


def _per_sample(value: object, i: int) -> object:
    return value(i) if callable(value) else value


class Fleet:
    """Inserts nodes, GPUs, devices and facts with one-line helpers; all values are bound parameters."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.con = duckdb.connect(str(path))
        create_schema(self.con)

    def close(self) -> None:
        self.con.close()

    def node(self, node: str, *, model: str = "H200", mode: str = "exclusive", nvlink_domain: str | None = None,
             dedicated_tenant: str | None = None) -> None:
        self.con.execute(
            "INSERT INTO nodes (node, gpu_model, sharing_mode, nvlink_domain, dedicated_tenant) VALUES (?, ?, ?, ?, ?)",
            [node, model, mode, nvlink_domain, dedicated_tenant],
        )

    def gpu(self, uuid: str, node: str, *, model: str = "H200", mode: str = "exclusive", replicas: int = 1,
            whole_device: bool = True) -> None:
        """A physical GPU; unless MIG (or ``whole_device=False``), also its whole-GPU device."""
        self.con.execute(
            "INSERT INTO gpus (gpu_uuid, node, gpu_index, gpu_model, sharing_mode, replicas) VALUES (?, ?, 0, ?, ?, ?)",
            [uuid, node, model, mode, replicas],
        )
        if mode != "mig" and whole_device:
            self.con.execute(
                """INSERT INTO devices (device_id, gpu_uuid, node, gpu_model, kind, profile, slices, gpu_equivalents,
                   sharing_mode) VALUES (?, ?, ?, ?, 'gpu', 'gpu', 7, 1.0, ?)""",
                [uuid, uuid, node, model, mode],
            )

    def mig(self, device_id: str, gpu_uuid: str, node: str, profile: str, *, model: str = "H200",
            gi: int = 1) -> None:
        slices = int(profile.split("g.")[0])
        self.con.execute(
            """INSERT INTO devices (device_id, gpu_uuid, node, gpu_model, kind, profile, gpu_instance_id,
               compute_instance_id, slices, gpu_equivalents, sharing_mode) VALUES (?, ?, ?, ?, 'mig', ?, ?, 0, ?, ?, 'mig')""",
            [device_id, gpu_uuid, node, model, profile, gi, slices, slices / 7],
        )

    def samples(self, device_id: str, *, start: datetime = T0, count: int = 60, every: int = 60,
                activity: float | None | Callable[[int], float | None] = 0.5,
                memory: int | None | Callable[[int], int | None] = None) -> None:
        self.readings(device_id, [(start + timedelta(seconds=i * every), _per_sample(activity, i), _per_sample(memory, i))
                                  for i in range(count)])

    def readings(self, device_id: str, rows: Sequence[tuple[datetime, float | None, int | None]]) -> None:
        """Device samples at any times: (ts, activity ratio, memory used bytes) each."""
        gpu, node = self._where(device_id)
        insert_rows(self.con, "device_samples", ("ts", "node", "gpu_uuid", "device_id", "activity_ratio",
                                                 "memory_used_bytes", "source"),
                    [(ts, node, gpu, device_id, activity, memory, "test") for ts, activity, memory in rows])

    def alloc(self, device_id: str, tenant: str, *, start: datetime = T0, count: int = 60, every: int = 60,
              namespace: str | None = None, pod: str = "p0", ge: float = 1.0) -> None:
        self.holders(device_id, [(start + timedelta(seconds=i * every), tenant, namespace or tenant, pod, ge)
                                 for i in range(count)])

    def holders(self, device_id: str, rows: Sequence[tuple[datetime, str, str, str, float]]) -> None:
        """Allocation rows at any times: (ts, tenant, namespace, pod, GPU-equivalents) each, container ``main``."""
        gpu, node = self._where(device_id)
        insert_rows(self.con, "allocations", ("ts", "node", "gpu_uuid", "device_id", "namespace", "pod", "container",
                                              "tenant", "gpu_equivalents", "source"),
                    [(ts, node, gpu, device_id, namespace, pod, "main", tenant, ge, "test")
                     for ts, tenant, namespace, pod, ge in rows])

    def gpu_sample(self, gpu_uuid: str, ts: datetime, **readings: object) -> None:
        node = self.con.execute("SELECT node FROM gpus WHERE gpu_uuid = ?", [gpu_uuid]).fetchone()
        cols = ", ".join(readings)
        marks = ", ".join("?" for _ in readings)
        self.con.execute(
            f"INSERT INTO gpu_samples (ts, node, gpu_uuid, source{', ' if cols else ''}{cols}) "  # noqa: S608 - test keys
            f"VALUES (?, ?, ?, 'test'{', ' if cols else ''}{marks})",
            [ts, node[0] if node else "", gpu_uuid, *readings.values()],
        )

    def xid(self, gpu_uuid: str, code: int, ts: datetime, count: int = 1) -> None:
        node = self.con.execute("SELECT node FROM gpus WHERE gpu_uuid = ?", [gpu_uuid]).fetchone()
        self.con.execute(
            "INSERT INTO events (ts, node, gpu_uuid, kind, code, count, source) VALUES (?, ?, ?, 'xid', ?, ?, 'test')",
            [ts, node[0] if node else "", gpu_uuid, code, count],
        )

    def pending(self, tenant: str, profile: str, ts: datetime, *, quantity: float = 1, gpu_model: str = "") -> None:
        self.con.execute(
            """INSERT INTO pending_demand (ts, tenant, resource, profile, gpu_model, quantity, workloads, source)
               VALUES (?, ?, 'nvidia.com/gpu', ?, ?, ?, 1, 'test')""",
            [ts, tenant, profile, gpu_model, quantity],
        )

    def namespace(self, namespace: str, tenant: str, *, policies: int = 0, vcluster: str | None = None,
                  ts: datetime = T0) -> None:
        self.con.execute(
            """INSERT INTO namespace_snapshots (ts, namespace, tenant, network_policies, virtual_cluster, source)
               VALUES (?, ?, ?, ?, ?, 'test')""",
            [ts, namespace, tenant, policies, vcluster],
        )

    def tenant(self, tenant: str, *, dedicated_pool: str | None = None, virtual_cluster: str | None = None) -> None:
        self.con.execute(
            "INSERT INTO tenants (tenant, dedicated_pool, virtual_cluster) VALUES (?, ?, ?)",
            [tenant, dedicated_pool, virtual_cluster],
        )

    def gap(self, target: str, start: datetime, end: datetime) -> None:
        self.con.execute(
            "INSERT INTO gaps (source, target, gap_start, gap_end, reason) VALUES ('scrape', ?, ?, ?, 'test')",
            [target, start, end],
        )

    def price(self, model: str, usd: float, contracted: float | None = None) -> None:
        record_price(self.con, Price(short_model(model), usd, contracted, "set by the test"), datetime(2026, 1, 1))

    def _where(self, device_id: str) -> tuple[str, str]:
        row = self.con.execute("SELECT gpu_uuid, node FROM devices WHERE device_id = ?", [device_id]).fetchone()
        assert row is not None, f"unknown device {device_id}"
        return str(row[0]), str(row[1])
