"""Render store frames back into exposition text, in gpulens's or dcgm-exporter's naming.

The inverse of :mod:`collector.mapping`, vectorized with polars: used to backfill a Prometheus from the
store or the simulator (``promtool tsdb create-blocks-from openmetrics``), and by the tests and the
ingest benchmark to produce exposition text with known truth. Throttle reasons and XID events are not
rendered; absent readings (NULL) produce no series, as the exporter does.
"""

from __future__ import annotations

from typing import Literal

import polars as pl

from collector.mapping import MIB
from gpulens.core import metric_catalog as M

Naming = Literal["gpulens", "dcgm"]


def _esc(col: pl.Expr) -> pl.Expr:
    return (
        col.cast(pl.Utf8)
        .fill_null("")
        .str.replace_all("\\", "\\\\", literal=True)
        .str.replace_all('"', '\\"', literal=True)
        .str.replace_all("\n", "\\n", literal=True)
    )


def _label_block(names: list[str]) -> pl.Expr:
    parts: list[pl.Expr] = []
    for i, name in enumerate(names):
        parts.append(pl.lit(("," if i else "") + f'{name}="'))
        parts.append(_esc(pl.col(name)))
        parts.append(pl.lit('"'))
    return pl.concat_str(parts)


def _series(frame: pl.DataFrame, metric: str, value: pl.Expr, labels: dict[str, pl.Expr]) -> pl.DataFrame:
    """Long rows (metric, labels text, value, ts_ms) for one metric; NULL values are dropped."""
    names = list(labels)
    out = frame.select(
        pl.lit(metric).alias("metric"),
        pl.col("ts").dt.epoch("ms").alias("ts_ms"),
        value.cast(pl.Float64).alias("value"),
        *[e.alias(n) for n, e in labels.items()],
    ).filter(pl.col("value").is_not_null())
    return out.select("metric", "ts_ms", "value", _label_block(names).alias("labels"))


BASE_THROTTLE_REASONS = ("hw_slowdown", "hw_thermal", "sw_power_cap", "sw_thermal")


def _throttle_series(g: pl.DataFrame, labels: dict[str, pl.Expr]) -> pl.DataFrame:
    """``gpulens_gpu_throttle_active``: 0/1 per known reason wherever the reasons are known (not NULL)."""
    seen = g["throttle_reasons"].explode().drop_nulls().unique().to_list()
    reasons = pl.DataFrame({"reason": sorted(set(BASE_THROTTLE_REASONS) | set(seen))})
    known = g.filter(pl.col("throttle_reasons").is_not_null()).join(reasons, how="cross")
    active = pl.col("throttle_reasons").list.contains(pl.col("reason")).cast(pl.Float64)
    return _series(known, M.GPU_THROTTLE_ACTIVE.name, active, {**labels, "reason": pl.col("reason")})


def gpulens_series(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """gpulens-named series of ``device_samples``, ``gpu_samples``, ``allocations`` (+ ``devices``, ``gpus``)."""
    parts = []
    dev = frames.get("device_samples")
    devices = frames.get("devices")
    if dev is not None and dev.height and devices is not None:
        d = dev.join(
            devices.select("device_id", "gpu_model", "profile", "gpu_instance_id", "compute_instance_id",
                           "gpu_equivalents", "sharing_mode"),
            on="device_id",
            how="inner",
        )
        base = {
            "node": pl.col("node"),
            "gpu": pl.col("gpu_uuid"),
            "device": pl.col("device_id"),
            "profile": pl.col("profile"),
            "gpu_instance": pl.col("gpu_instance_id"),
        }
        ident = {**base, "model": pl.col("gpu_model"), "compute_instance": pl.col("compute_instance_id"),
                 "sharing_mode": pl.col("sharing_mode")}
        parts += [
            _series(d, M.DEVICE_GPU_EQUIVALENTS.name, pl.col("gpu_equivalents"), ident),
            _series(d, M.DEVICE_ACTIVITY_RATIO.name, pl.col("activity_ratio"),
                    {**base, "compute_instance": pl.col("compute_instance_id")}),
            _series(d, M.DEVICE_MEMORY_USED_BYTES.name, pl.col("memory_used_bytes"), base),
            _series(d, M.DEVICE_MEMORY_TOTAL_BYTES.name, pl.col("memory_total_bytes"), base),
        ]
    gs = frames.get("gpu_samples")
    if gs is not None and gs.height:
        gpus = frames.get("gpus")
        g = gs
        if gpus is not None and gpus.height:
            g = gs.join(gpus.select("gpu_uuid", "gpu_index", "gpu_model", pl.col("sharing_mode").alias("gmode")),
                        on="gpu_uuid", how="left")
            parts.append(_series(g, M.GPU_INFO.name, pl.lit(1.0), {
                "node": pl.col("node"), "gpu": pl.col("gpu_uuid"), "index": pl.col("gpu_index"),
                "model": pl.col("gpu_model"), "sharing_mode": pl.col("gmode"), "driver_version": pl.lit(""),
            }))
        ng = {"node": pl.col("node"), "gpu": pl.col("gpu_uuid")}
        for metric, column in (
            (M.GPU_UP.name, pl.col("up").cast(pl.Float64)),
            (M.GPU_POWER_WATTS.name, pl.col("power_watts")),
            (M.GPU_ENERGY_JOULES.name, pl.col("energy_joules")),
            (M.GPU_TEMPERATURE_CELSIUS.name, pl.col("temperature_celsius")),
            (M.GPU_SM_CLOCK_HERTZ.name, pl.col("sm_clock_hz")),
            (M.GPU_MEMORY_CLOCK_HERTZ.name, pl.col("memory_clock_hz")),
            (M.GPU_RETIRED_PAGES.name, pl.col("retired_pages_total")),
            (M.GPU_ROW_REMAP_FAILED.name, pl.col("remapped_rows_failure").cast(pl.Float64)),
            (M.GPU_PCIE_REPLAY.name, pl.col("pcie_replay_total")),
            (M.GPU_NVLINK_CRC_ERRORS.name, pl.col("nvlink_crc_errors_total")),
            (M.GPU_THERMAL_VIOLATION_SECONDS.name, pl.col("thermal_violation_seconds_total")),
        ):
            if column.meta.root_names()[0] in g.columns:
                parts.append(_series(g, metric, column, ng))
        if "throttle_reasons" in g.columns:
            parts.append(_throttle_series(g, ng))
        for kind, ecc_column in (("corrected", "ecc_corrected_total"), ("uncorrected", "ecc_uncorrected_total")):
            if ecc_column in g.columns:
                parts.append(
                    _series(g, M.GPU_ECC_ERRORS.name, pl.col(ecc_column), {**ng, "type": pl.lit(kind)})
                )
    al = frames.get("allocations")
    if al is not None and al.height:
        profile = pl.lit("gpu")
        a = al
        if devices is not None:
            a = al.join(devices.select("device_id", "profile"), on="device_id", how="left")
            profile = pl.col("profile")
        parts.append(_series(a, M.ALLOCATION_GPU_EQUIVALENTS.name, pl.col("gpu_equivalents"), {
            "node": pl.col("node"), "gpu": pl.col("gpu_uuid"), "device": pl.col("device_id"), "profile": profile,
            "namespace": pl.col("namespace"), "pod": pl.col("pod"), "container": pl.col("container"),
            "tenant": pl.col("tenant"), "sharing_mode": pl.col("sharing_mode"),
            "workload_kind": pl.col("workload_kind"), "workload": pl.col("workload_name"),
        }))
    return pl.concat(parts) if parts else pl.DataFrame()


def dcgm_series(frames: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """dcgm-exporter-named series: one entity per whole GPU or MIG GPU instance, units as DCGM gives them."""
    dev, devices, gs = frames.get("device_samples"), frames.get("devices"), frames.get("gpu_samples")
    if dev is None or devices is None or dev.height == 0:
        return pl.DataFrame()
    d = dev.join(devices.select("device_id", "gpu_model", "profile", "gpu_instance_id", "compute_instance_id"),
                 on="device_id", how="inner")
    # dcgm-exporter watches GPU instances, not compute instances: keep the first CI of each GI.
    d = d.sort("compute_instance_id", nulls_last=False).unique(["gpu_uuid", "gpu_instance_id", "ts"], keep="first")
    gpus = frames.get("gpus")
    if gpus is not None and gpus.height:
        d = d.join(gpus.select("gpu_uuid", "gpu_index"), on="gpu_uuid", how="left")
    else:
        d = d.with_columns(gpu_index=pl.lit(0))
    if gs is not None and gs.height:
        d = d.join(gs.drop("node", "source"), on=["gpu_uuid", "ts"], how="left")
    al = frames.get("allocations")
    if al is not None and al.height:
        holder = al.sort("pod").unique(["device_id", "ts"], keep="first").select(
            "device_id", "ts", "namespace", "pod", "container")
        d = d.join(holder, on=["device_id", "ts"], how="left")
    else:
        d = d.with_columns(namespace=pl.lit(None, pl.Utf8), pod=pl.lit(None, pl.Utf8),
                           container=pl.lit(None, pl.Utf8))
    mig = pl.col("profile") != "gpu"
    labels = {
        "gpu": pl.col("gpu_index"),
        "UUID": pl.col("gpu_uuid"),
        "device": pl.format("nvidia{}", pl.col("gpu_index")),
        "modelName": pl.col("gpu_model"),
        "Hostname": pl.col("node"),
        "GPU_I_PROFILE": pl.when(mig).then(pl.col("profile")),
        "GPU_I_ID": pl.when(mig).then(pl.col("gpu_instance_id")),
        "container": pl.col("container"),
        "namespace": pl.col("namespace"),
        "pod": pl.col("pod"),
    }
    used_mib = pl.col("memory_used_bytes") / MIB
    parts = [
        _series(d, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", pl.col("activity_ratio"), labels),
        _series(d, "DCGM_FI_DEV_FB_USED", used_mib, labels),
        _series(d, "DCGM_FI_DEV_FB_FREE", pl.col("memory_total_bytes") / MIB - used_mib, labels),
        _series(d, "DCGM_FI_DEV_FB_RESERVED", pl.when(used_mib.is_not_null()).then(0.0), labels),
    ]
    if gs is not None and gs.height:
        parts += [
            _series(d, "DCGM_FI_DEV_POWER_USAGE", pl.col("power_watts"), labels),
            _series(d, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", pl.col("energy_joules") * 1000.0, labels),
            _series(d, "DCGM_FI_DEV_GPU_TEMP", pl.col("temperature_celsius"), labels),
            _series(d, "DCGM_FI_DEV_SM_CLOCK", pl.col("sm_clock_hz") / 1e6, labels),
            _series(d, "DCGM_FI_DEV_MEM_CLOCK", pl.col("memory_clock_hz") / 1e6, labels),
        ]
    return pl.concat(parts)


def series_for(frames: dict[str, pl.DataFrame], naming: Naming) -> pl.DataFrame:
    return gpulens_series(frames) if naming == "gpulens" else dcgm_series(frames)


def render_text(series: pl.DataFrame, *, timestamps: bool = False) -> str:
    """Prometheus text format (``metric{labels} value [ts_ms]``), one line per row."""
    if series.height == 0:
        return ""
    value = pl.col("value").cast(pl.Utf8).str.replace("^inf$", "+Inf").str.replace("^-inf$", "-Inf")
    parts = [pl.col("metric"), pl.lit("{"), pl.col("labels"), pl.lit("} "), value]
    if timestamps:
        parts += [pl.lit(" "), pl.col("ts_ms").cast(pl.Utf8)]
    lines = series.select(pl.concat_str(parts).alias("line"))["line"]
    return "\n".join(lines.to_list()) + "\n"


def render_openmetrics(series: pl.DataFrame) -> str:
    """OpenMetrics text for ``promtool tsdb create-blocks-from openmetrics``: series grouped, seconds, ``# EOF``."""
    if series.height == 0:
        return "# EOF\n"
    ordered = series.sort("metric", "labels", "ts_ms")
    seconds = (pl.col("ts_ms") / 1000.0).cast(pl.Utf8)
    value = pl.col("value").cast(pl.Utf8).str.replace("^inf$", "+Inf").str.replace("^-inf$", "-Inf")
    lines = ordered.select(
        pl.concat_str([pl.col("metric"), pl.lit("{"), pl.col("labels"), pl.lit("} "), value, pl.lit(" "), seconds])
    ).to_series()
    return "\n".join(lines.to_list()) + "\n# EOF\n"
