"""A small deterministic fleet as store frames, for benchmarks and round-trip tests of the collector.

Unlike the simulator (``gpulens/sim``) it models nothing realistic: it is a fast, seedable table of
known values (numpy), so that "what went in" is exactly known when checking what the collector
stored. Each node has one H200 in MIG mode (a ``3g.71gb`` and two ``1g.18gb`` instances, one of them
unallocated) and ``whole_gpus`` whole H100s; tenant strings can be made hostile on purpose.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from gpulens.core.vocabulary import slices_gpu_equivalents

GIB = 1024**3
HOSTILE = "team \"q\" \\ back'; DROP TABLE device_samples; --\nnext a=b,{c}\",x=\""


def _uuid(kind: str, node: int, gpu: int, extra: int = 0) -> str:
    return f"{kind}-{node:08x}-{gpu:04x}-4{extra:03x}-8000-{node * 1000 + gpu:012x}"


def synthetic_frames(
    start: float,
    end: float,
    step: float,
    *,
    nodes: int = 2,
    whole_gpus: int = 1,
    seed: int = 7,
    hostile_tenant: bool = False,
) -> dict[str, pl.DataFrame]:
    """Frames shaped like the store's tables for ``[start, end)`` every ``step`` seconds."""
    rng = np.random.default_rng(seed)
    times = np.arange(start, end, step)
    ts_all = pl.from_epoch(pl.Series("ts", np.rint(times * 1000).astype(np.int64)), time_unit="ms")
    devices: list[tuple[Any, ...]] = []
    gpus: list[tuple[Any, ...]] = []
    for n in range(nodes):
        node = f"gpu-node-{n}"
        mig_gpu = _uuid("GPU", n, 0)
        gpus.append((mig_gpu, node, 0, "NVIDIA H200", 141 * GIB, "mig"))
        for i, (profile, gi, slices, mem) in enumerate(((("3g.71gb", 2, 3, 71)), ("1g.18gb", 9, 1, 18),
                                                        ("1g.18gb", 10, 1, 18))):
            devices.append((_uuid("MIG", n, 0, i + 1), mig_gpu, node, "NVIDIA H200", "mig", profile, gi, 0,
                            slices, slices_gpu_equivalents(slices), mem * GIB, "mig"))
        for g in range(1, whole_gpus + 1):
            uuid = _uuid("GPU", n, g)
            gpus.append((uuid, node, g, "NVIDIA H100 80GB HBM3", 80 * GIB, "exclusive"))
            devices.append((uuid, uuid, node, "NVIDIA H100 80GB HBM3", "gpu", "gpu", None, None, 7, 1.0,
                            80 * GIB, "exclusive"))
    dev_cols = ["device_id", "gpu_uuid", "node", "gpu_model", "kind", "profile", "gpu_instance_id",
                "compute_instance_id", "slices", "gpu_equivalents", "memory_total_bytes", "sharing_mode"]
    dev_df = pl.DataFrame(devices, schema=dev_cols, orient="row").with_columns(
        pl.col("gpu_instance_id").cast(pl.Int32), pl.col("compute_instance_id").cast(pl.Int32),
        pl.col("slices").cast(pl.Int32), first_seen=ts_all.min(), last_seen=ts_all.max(),
    )
    gpu_df = pl.DataFrame(gpus, schema=["gpu_uuid", "node", "gpu_index", "gpu_model", "memory_total_bytes",
                                        "sharing_mode"], orient="row").with_columns(
        pl.col("gpu_index").cast(pl.Int32), first_seen=ts_all.min(), last_seen=ts_all.max())
    nd, nt = dev_df.height, len(times)
    grid = pl.DataFrame({"ts": ts_all}).join(dev_df.select("device_id", "gpu_uuid", "node", "memory_total_bytes"),
                                             how="cross")
    activity = np.round(rng.random(nd * nt), 6)
    used = (rng.random(nd * nt) * grid["memory_total_bytes"].to_numpy()).astype(np.int64)
    device_samples = grid.with_columns(
        activity_ratio=pl.Series(activity), memory_used_bytes=pl.Series(used), source=pl.lit("synthetic")
    ).select("ts", "node", "gpu_uuid", "device_id", "activity_ratio", "memory_used_bytes", "memory_total_bytes",
             "source")
    ng = gpu_df.height
    ggrid = pl.DataFrame({"ts": ts_all}).join(gpu_df.select("gpu_uuid", "node"), how="cross")
    k = ng * nt
    energy = np.cumsum(rng.random(k).reshape(nt, ng) * 1000 * step, axis=0).reshape(-1)
    gpu_samples = ggrid.with_columns(
        up=pl.lit(True),
        power_watts=pl.Series(np.round(rng.random(k) * 700, 3)),
        energy_joules=pl.Series(np.round(energy, 3)),
        temperature_celsius=pl.Series(np.round(30 + rng.random(k) * 50, 1)),
        sm_clock_hz=pl.Series(np.round(rng.random(k) * 1980) * 1e6),
        memory_clock_hz=pl.lit(2619e6),
        ecc_corrected_total=pl.lit(0, dtype=pl.Int64),
        ecc_uncorrected_total=pl.lit(0, dtype=pl.Int64),
        pcie_replay_total=pl.lit(3, dtype=pl.Int64),
        remapped_rows_failure=pl.lit(False),
        source=pl.lit("synthetic"),
    )
    # Every device but the second 1g.18gb of each node is held by one pod for the whole window.
    held = dev_df.filter(~((pl.col("profile") == "1g.18gb") & (pl.col("gpu_instance_id") == 10)))
    tenant = pl.lit(HOSTILE) if hostile_tenant else pl.format("team-{}", pl.col("node").str.slice(-1))
    owners = held.with_columns(
        namespace=tenant,
        pod=pl.format("pod-{}", pl.col("device_id").str.slice(-6)),
        container=pl.lit("main"),
        tenant=tenant,
        workload_kind=pl.lit("Job"),
        workload_name=pl.format("job-{}", pl.col("device_id").str.slice(-6)),
    )
    allocations = pl.DataFrame({"ts": ts_all}).join(owners, how="cross").select(
        "ts", "node", "gpu_uuid", "device_id", "namespace", "pod", "container", "tenant", "sharing_mode",
        "gpu_equivalents", "workload_kind", "workload_name", source=pl.lit("synthetic"))
    return {
        "devices": dev_df,
        "gpus": gpu_df,
        "device_samples": device_samples,
        "gpu_samples": gpu_samples,
        "allocations": allocations,
    }
