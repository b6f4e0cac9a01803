"""Map a long frame of samples (gpulens or dcgm-exporter naming) into store frames, units normalized.

Input: the long frame of :mod:`collector.exposition` or :mod:`collector.prometheus`: ``metric``,
``value``, ``ts_ms`` (Int64 milliseconds) and one string column per label. Output: polars frames named
like the store tables (``device_samples``, ``gpu_samples``, ``allocations``, ``events``, ``devices``,
``gpus``, ``nodes``), ready for :meth:`collector.store.Store.ingest_window`.

dcgm-exporter has no MIG UUID and no compute-instance label: a MIG GPU instance becomes the device
``<GPU UUID>/gi<GPU_I_ID>`` (or ``dra_mig_device_uuid`` when the exporter runs in DRA mode), and its
tenant is its namespace. Every dcgm-exporter generation is read (:mod:`collector.dcgm_fields`): each
sample is converted to base units by the name it was read under (pre-4.9 MiB, %, mJ and MHz, 4.9+
bytes, ratios, joules and hertz), so both generations make the same rows.

Memory of a MIG GPU instance stays on the row of the device that carries it (its first compute
instance; the others have NULL), exactly as the exporter and the simulator report it.
"""

from __future__ import annotations

import json
from typing import Literal

import polars as pl

from collector.dcgm_fields import BY_KEY, READ_AS
from collector.dcgm_fields import DCGM_METRICS as DCGM_METRICS
from collector.dcgm_fields import MIB as MIB
from collector.queue_metrics import map_queue_systems
from collector.topology import TOPOLOGY_METRICS, gpu_topology_frame
from gpulens.core import metric_catalog as M
from gpulens.core.gpu_share import FRACTION_RESOURCES
from gpulens.core.metric_catalog import PREFIX, MetricGroup, in_groups
from gpulens.core.vocabulary import COMPUTE_SLICES

SchemaName = Literal["gpulens", "dcgm", "auto"]


GPULENS_METRICS = tuple(dict.fromkeys((
    *(spec.name for spec in in_groups(MetricGroup.GPU, MetricGroup.DEVICE, MetricGroup.ALLOCATION)),
    *TOPOLOGY_METRICS,
)))
"""gpulens series the collector reads (the Prometheus source queries exactly these)."""

GPU_SAMPLE_METRICS = tuple(spec for spec in in_groups(MetricGroup.GPU) if spec not in (M.GPU_XID_ERRORS, M.GPU_XID_LAST_SEEN))
"""Per-GPU series that become ``gpu_samples`` rows (XID series become ``events``)."""


KUEUE_METRICS = (
    "kueue_cluster_queue_nominal_quota",
    "kueue_cluster_queue_borrowing_limit",
    "kueue_cluster_queue_lending_limit",
    "kueue_cluster_queue_resource_usage",
    "kueue_cluster_queue_resource_pending",
    "kueue_pending_workloads",
    "kueue_local_queue_resource_usage",
    "kueue_local_queue_pending_workloads",
)
"""Kueue's own metrics: quotas, usage and pending demand when the Kubernetes API is not reachable (the
``kueue_local_queue_*`` ones need Kueue's LocalQueueMetrics gate)."""

CANONICAL_LABELS = (
    "node",
    "gpu",
    "index",
    "device",
    "model",
    "profile",
    "gpu_instance",
    "compute_instance",
    "sharing_mode",
    "namespace",
    "pod",
    "container",
    "tenant",
    "workload_kind",
    "workload",
    "reason",
    "type",
    "xid",
)

_TS = pl.from_epoch(pl.col("ts_ms"), time_unit="ms").alias("ts")


def _ensure(df: pl.DataFrame, names: tuple[str, ...]) -> pl.DataFrame:
    missing = [n for n in names if n not in df.columns]
    return df.with_columns([pl.lit(None, dtype=pl.Utf8).alias(n) for n in missing]) if missing else df


def _coalesce(df: pl.DataFrame, *names: str) -> pl.Expr:
    present = [pl.col(n) for n in names if n in df.columns]
    return pl.coalesce(present) if present else pl.lit(None, dtype=pl.Utf8)


def _metric_value(name: str) -> pl.Expr:
    return pl.col("value").filter(pl.col("metric") == name)


def _first(name: str) -> pl.Expr:
    return _metric_value(name).first()


def _slices(profile: pl.Expr) -> pl.Expr:
    return profile.str.extract(r"^(\d+)g", 1).cast(pl.Int32, strict=False)


def _empty(schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def _profile_of(resource: pl.Expr) -> pl.Expr:
    """``nvidia.com/mig-1g.18gb`` -> ``1g.18gb``; a resource for part of a GPU (HAMi cores or memory, milli-GPU,
    gpushare: a queue's sum of them is no shape) -> ``fraction``; any other resource -> ``gpu``."""
    return (pl.when(resource.str.replace(r"^(requests|limits)\.", "").is_in(FRACTION_RESOURCES)).then(pl.lit("fraction"))
            .otherwise(pl.coalesce(resource.str.extract(r"^nvidia\.com/mig-(.+)$", 1), pl.lit("gpu"))))


def map_kueue(long: pl.DataFrame, source: str) -> dict[str, pl.DataFrame]:
    """``quota_snapshots`` and ``pending_demand`` from Kueue's metrics (``+Inf`` limits become NULL)."""
    kueue = long.filter(pl.col("metric").is_in(KUEUE_METRICS))
    if kueue.height == 0:
        return {}
    df = _ensure(kueue, ("cluster_queue", "flavor", "resource", "status", "cohort")).with_columns(_TS)

    def finite(metric: str) -> pl.Expr:
        return pl.col("value").filter((pl.col("metric") == metric) & pl.col("value").is_finite()).first()

    quota = (
        df.filter(pl.col("metric").str.starts_with("kueue_cluster_queue_") & pl.col("resource").is_not_null()
                  & (pl.col("metric") != "kueue_cluster_queue_resource_pending"))
        .group_by("ts", "cluster_queue", "flavor", "resource")
        .agg(
            nominal_quota=finite("kueue_cluster_queue_nominal_quota"),
            borrowing_limit=finite("kueue_cluster_queue_borrowing_limit"),
            lending_limit=finite("kueue_cluster_queue_lending_limit"),
            usage=finite("kueue_cluster_queue_resource_usage"),
            cohort=pl.col("cohort").drop_nulls().first(),
        )
        .select(
            "ts",
            pl.lit("ClusterQueue").alias("object_kind"),
            pl.lit("").alias("object_namespace"),
            pl.col("cluster_queue").alias("object_name"),
            pl.col("cluster_queue").alias("tenant"),
            pl.col("flavor").fill_null(""),
            "resource",
            "nominal_quota",
            "borrowing_limit",
            "lending_limit",
            "usage",
            pl.when(pl.col("cohort").is_not_null())
            .then(pl.concat_str(pl.lit('{"cohort":'), pl.col("cohort").map_elements(
                lambda c: json.dumps(c), return_dtype=pl.Utf8), pl.lit("}")))
            .alias("annotations"),
            pl.lit(source).alias("source"),
        )
    )
    workloads = (
        df.filter(pl.col("metric") == "kueue_pending_workloads")
        .group_by("ts", "cluster_queue")
        .agg(workloads=pl.col("value").sum())
    )
    gauge = (
        df.filter((pl.col("metric") == "kueue_cluster_queue_resource_pending") & pl.col("resource").is_not_null())
        .group_by("ts", "cluster_queue", "resource")
        .agg(quantity=pl.col("value").sum())
        .filter(pl.col("quantity") > 0)
    )
    # Kueue before 0.18 exports no resource gauge: a count of pending workloads without their shapes
    # is kept as a row with resource '' and quantity NULL (pending, amount not measured).
    counted_only = (
        workloads.filter(pl.col("workloads") > 0)
        .join(gauge.select("ts", "cluster_queue").unique(), on=["ts", "cluster_queue"], how="anti")
        .select("ts", "cluster_queue", pl.lit("").alias("resource"), pl.lit(None, dtype=pl.Float64).alias("quantity"))
    )
    pending = (
        pl.concat([gauge.with_columns(pl.col("quantity").cast(pl.Float64)), counted_only], how="diagonal_relaxed")
        .join(workloads, on=["ts", "cluster_queue"], how="left")
        .select(
            "ts",
            pl.col("cluster_queue").alias("tenant"),
            "cluster_queue",
            pl.lit("").alias("namespace"),
            pl.lit("").alias("flavor"),
            "resource",
            pl.when(pl.col("resource") == "").then(pl.lit("")).otherwise(_profile_of(pl.col("resource")))
            .alias("profile"),
            pl.lit("").alias("gpu_model"),
            "quantity",
            pl.col("workloads").fill_null(0).round(0).cast(pl.Int32),
            pl.lit(source).alias("source"),
        )
    )
    return {"quota_snapshots": quota, "pending_demand": pending}


def map_local_queues(long: pl.DataFrame, source: str) -> dict[str, pl.DataFrame]:
    """``quota_snapshots`` rows of kind ``LocalQueue`` (as the Kubernetes inventory writes them) from Kueue's
    local-queue metrics: usage per flavor and resource, and the queue's pending workloads (summed over
    ``status``) as ``annotations.pendingWorkloads``; a queue with pending work and no usage series gets one
    row with flavor and resource ''. No pending series: no such annotation (not measured, not 0)."""
    lq = long.filter(pl.col("metric").str.starts_with("kueue_local_queue_"))
    if lq.height == 0:
        return {}
    df = (_ensure(lq, ("name", "local_queue", "namespace", "flavor", "resource"))
          .with_columns(_TS, queue=pl.coalesce("local_queue", "name"), flavor=pl.col("flavor").fill_null(""))
          .filter(pl.col("queue").is_not_null() & pl.col("namespace").is_not_null() & pl.col("value").is_finite()))
    keys = ["ts", "namespace", "queue"]
    usage = (df.filter((pl.col("metric") == "kueue_local_queue_resource_usage") & pl.col("resource").is_not_null())
             .group_by(*keys, "flavor", "resource").agg(usage=pl.col("value").sum()))
    pending = (df.filter(pl.col("metric") == "kueue_local_queue_pending_workloads")
               .group_by(*keys).agg(pending=pl.col("value").sum().round(0).cast(pl.Int64)))
    alone = pending.join(usage.select(keys).unique(), on=keys, how="anti").select(
        *keys, pl.lit("").alias("flavor"), pl.lit("").alias("resource"), pl.lit(None, dtype=pl.Float64).alias("usage"))
    rows = pl.concat([usage, alone], how="diagonal_relaxed").join(pending, on=keys, how="left")
    quota = rows.select(
        "ts",
        pl.lit("LocalQueue").alias("object_kind"),
        pl.col("namespace").alias("object_namespace"),
        pl.col("queue").alias("object_name"),
        pl.col("namespace").alias("tenant"),
        "flavor",
        "resource",
        *(pl.lit(None, dtype=pl.Float64).alias(c) for c in ("nominal_quota", "borrowing_limit", "lending_limit")),
        "usage",
        pl.when(pl.col("pending").is_not_null())
        .then(pl.format('{{"pendingWorkloads":{}}}', pl.col("pending")))
        .alias("annotations"),
        pl.lit(source).alias("source"),
    )
    return {"quota_snapshots": quota}


def split_by_schema(long: pl.DataFrame, schema: SchemaName) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The gpulens rows and the dcgm rows of ``long`` that ``schema`` asks for."""
    is_gpulens = pl.col("metric").str.starts_with(PREFIX)
    is_dcgm = pl.col("metric").str.starts_with("DCGM_")
    gl = long.filter(is_gpulens) if schema in ("gpulens", "auto") else long.clear()
    dc = long.filter(is_dcgm) if schema in ("dcgm", "auto") else long.clear()
    return gl, dc


def to_store_frames(long: pl.DataFrame, schema: SchemaName, source: str) -> dict[str, pl.DataFrame]:
    """All store frames for the samples of ``long`` (``ts_ms`` must be filled)."""
    gl, dc = split_by_schema(long, schema)
    frames: list[dict[str, pl.DataFrame]] = []
    if gl.height:
        frames.append(map_gpulens(gl, source))
    if dc.height:
        frames.append(map_dcgm(normalize_dcgm_labels(dc), source))
    if long.height and "metric" in long.columns:
        frames.append(map_kueue(long, source))
        frames.append(map_local_queues(long, source))
        frames.extend(map_queue_systems(long, source))
    out: dict[str, pl.DataFrame] = {}
    for part in frames:
        for table, frame in part.items():
            if frame.height == 0:
                continue
            out[table] = pl.concat([out[table], frame], how="diagonal_relaxed") if table in out else frame
    return out


# -- gpulens naming ------------------------------------------------------------------------------


def map_gpulens(long: pl.DataFrame, source: str) -> dict[str, pl.DataFrame]:
    """Store frames from gpulens's own series (names and labels of docs/metrics.md)."""
    df = _ensure(long, CANONICAL_LABELS).with_columns(_TS)
    return {
        "device_samples": _gpulens_device_samples(df, source),
        "gpu_samples": _gpulens_gpu_samples(df, source),
        "allocations": _gpulens_allocations(df, source),
        "events": _gpulens_events(df, source),
        "gpu_topology": gpu_topology_frame(df),
        **_gpulens_dimensions(df),
    }


def _gpulens_device_samples(df: pl.DataFrame, source: str) -> pl.DataFrame:
    metrics = [spec.name for spec in in_groups(MetricGroup.DEVICE)]
    dev = df.filter(pl.col("metric").is_in(metrics) & pl.col("device").is_not_null())
    if dev.height == 0:
        return _empty({})
    grouped = dev.group_by("device", "ts").agg(
        node=pl.col("node").first(),
        gpu_uuid=pl.col("gpu").first(),
        activity_ratio=_first(M.DEVICE_ACTIVITY_RATIO.name),
        memory_used_bytes=_first(M.DEVICE_MEMORY_USED_BYTES.name),
        memory_total_bytes=_first(M.DEVICE_MEMORY_TOTAL_BYTES.name),
    )
    return grouped.select(
        "ts",
        "node",
        "gpu_uuid",
        pl.col("device").alias("device_id"),
        "activity_ratio",
        pl.col("memory_used_bytes").round(0).cast(pl.Int64),
        pl.col("memory_total_bytes").round(0).cast(pl.Int64),
        pl.lit(source).alias("source"),
        pl.when(pl.col("activity_ratio").is_not_null()).then(pl.lit(M.DEVICE_ACTIVITY_RATIO.name))
        .alias("activity_signal"),
    )


def _gpulens_gpu_samples(df: pl.DataFrame, source: str) -> pl.DataFrame:
    gpu_metrics = [spec.name for spec in GPU_SAMPLE_METRICS]
    g = df.filter(pl.col("metric").is_in(gpu_metrics) & pl.col("gpu").is_not_null())
    if g.height == 0:
        return _empty({})
    throttle = pl.col("metric") == M.GPU_THROTTLE_ACTIVE.name
    ecc = M.GPU_ECC_ERRORS.name
    grouped = g.group_by("gpu", "ts").agg(
        node=pl.col("node").first(),
        up=_first(M.GPU_UP.name),
        power_watts=_first(M.GPU_POWER_WATTS.name),
        energy_joules=_first(M.GPU_ENERGY_JOULES.name),
        temperature_celsius=_first(M.GPU_TEMPERATURE_CELSIUS.name),
        sm_clock_hz=_first(M.GPU_SM_CLOCK_HERTZ.name),
        memory_clock_hz=_first(M.GPU_MEMORY_CLOCK_HERTZ.name),
        throttle_series=throttle.sum(),
        throttle_reasons=pl.col("reason").filter(throttle & (pl.col("value") == 1)).sort(),
        ecc_corrected_total=pl.col("value").filter((pl.col("metric") == ecc) & (pl.col("type") == "corrected")).first(),
        ecc_uncorrected_total=pl.col("value")
        .filter((pl.col("metric") == ecc) & (pl.col("type") == "uncorrected"))
        .first(),
        retired_pages_total=_first(M.GPU_RETIRED_PAGES.name),
        remapped_rows_failure=_first(M.GPU_ROW_REMAP_FAILED.name),
        pcie_replay_total=_first(M.GPU_PCIE_REPLAY.name),
        nvlink_crc_errors_total=_first(M.GPU_NVLINK_CRC_ERRORS.name),
        thermal_violation_seconds_total=_first(M.GPU_THERMAL_VIOLATION_SECONDS.name),
    )
    ints = ("ecc_corrected_total", "ecc_uncorrected_total", "retired_pages_total", "pcie_replay_total",
            "nvlink_crc_errors_total")
    return grouped.select(
        "ts",
        "node",
        pl.col("gpu").alias("gpu_uuid"),
        (pl.col("up") == 1).alias("up"),
        "power_watts",
        "energy_joules",
        "temperature_celsius",
        "sm_clock_hz",
        "memory_clock_hz",
        pl.when(pl.col("throttle_series") > 0).then(pl.col("throttle_reasons")).alias("throttle_reasons"),
        *[pl.col(c).round(0).cast(pl.Int64) for c in ints],
        (pl.col("remapped_rows_failure") == 1).alias("remapped_rows_failure"),
        "thermal_violation_seconds_total",
        pl.lit(source).alias("source"),
    ).sort("gpu_uuid", "ts")


def _gpulens_allocations(df: pl.DataFrame, source: str) -> pl.DataFrame:
    a = df.filter((pl.col("metric") == M.ALLOCATION_GPU_EQUIVALENTS.name) & pl.col("device").is_not_null())
    if a.height == 0:
        return _empty({})
    return a.select(
        "ts",
        "node",
        pl.col("gpu").alias("gpu_uuid"),
        pl.col("device").alias("device_id"),
        pl.col("namespace").fill_null(""),
        pl.col("pod").fill_null(""),
        pl.col("container").fill_null(""),
        pl.coalesce("tenant", "namespace").fill_null("").alias("tenant"),
        "sharing_mode",
        pl.col("value").alias("gpu_equivalents"),
        pl.col("workload_kind").replace("", None),
        pl.col("workload").replace("", None).alias("workload_name"),
        pl.lit(source).alias("source"),
    ).unique(["device_id", "ts", "namespace", "pod", "container"], keep="first")


def _gpulens_events(df: pl.DataFrame, source: str) -> pl.DataFrame:
    """One ``xid`` event per GPU, code and last-seen instant (the exact count stays in the counter)."""
    seen = df.filter((pl.col("metric") == M.GPU_XID_LAST_SEEN.name) & pl.col("xid").is_not_null())
    if seen.height == 0:
        return _empty({})
    totals = df.filter(pl.col("metric") == M.GPU_XID_ERRORS.name).select(
        "gpu", "xid", "ts", total=pl.col("value")
    )
    ev = seen.join(totals, on=["gpu", "xid", "ts"], how="left").group_by("gpu", "xid", "value").agg(
        node=pl.col("node").first(), total=pl.col("total").max()
    )
    return ev.select(
        pl.from_epoch((pl.col("value") * 1000).round(0).cast(pl.Int64), time_unit="ms").alias("ts"),
        "node",
        pl.col("gpu").alias("gpu_uuid"),
        pl.lit(None, dtype=pl.Utf8).alias("device_id"),
        pl.lit("xid").alias("kind"),
        pl.col("xid").cast(pl.Int32, strict=False).alias("code"),
        pl.lit(1, dtype=pl.Int64).alias("count"),
        pl.format("counter total {}", pl.col("total").cast(pl.Int64)).alias("detail"),
        pl.lit(source).alias("source"),
    ).filter(pl.col("code").is_not_null())


def _gpulens_dimensions(df: pl.DataFrame) -> dict[str, pl.DataFrame]:
    out: dict[str, pl.DataFrame] = {}
    ident = df.filter((pl.col("metric") == M.DEVICE_GPU_EQUIVALENTS.name) & pl.col("device").is_not_null())
    totals = (
        df.filter(pl.col("metric") == M.DEVICE_MEMORY_TOTAL_BYTES.name)
        .group_by("device")
        .agg(memory_total_bytes=pl.col("value").max().round(0).cast(pl.Int64))
    )
    if ident.height:
        profile = pl.col("profile").fill_null("gpu")
        devices = ident.group_by("device").agg(
            gpu_uuid=pl.col("gpu").first(),
            node=pl.col("node").first(),
            gpu_model=pl.col("model").first(),
            profile=profile.first(),
            gpu_instance_id=pl.col("gpu_instance").first(),
            compute_instance_id=pl.col("compute_instance").first(),
            gpu_equivalents=pl.col("value").last(),
            sharing_mode=pl.col("sharing_mode").first(),
            first_seen=pl.col("ts").min(),
            last_seen=pl.col("ts").max(),
        )
        out["devices"] = devices.join(totals, on="device", how="left").select(
            pl.col("device").alias("device_id"),
            "gpu_uuid",
            "node",
            "gpu_model",
            pl.when(pl.col("profile") == "gpu").then(pl.lit("gpu")).otherwise(pl.lit("mig")).alias("kind"),
            "profile",
            pl.col("gpu_instance_id").replace("", None).cast(pl.Int32, strict=False),
            pl.col("compute_instance_id").replace("", None).cast(pl.Int32, strict=False),
            pl.when(pl.col("profile") == "gpu").then(7).otherwise(_slices(pl.col("profile"))).alias("slices"),
            "gpu_equivalents",
            "memory_total_bytes",
            "sharing_mode",
            "first_seen",
            "last_seen",
        )
    info = df.filter((pl.col("metric") == M.GPU_INFO.name) & pl.col("gpu").is_not_null())
    if info.height:
        whole = totals.join(ident.filter(pl.col("profile") == "gpu").select("device").unique(), on="device")
        gpus = info.group_by("gpu").agg(
            node=pl.col("node").first(),
            gpu_index=pl.col("index").first().cast(pl.Int32, strict=False),
            gpu_model=pl.col("model").first(),
            sharing_mode=pl.col("sharing_mode").first(),
            first_seen=pl.col("ts").min(),
            last_seen=pl.col("ts").max(),
        )
        out["gpus"] = gpus.join(whole.rename({"device": "gpu"}), on="gpu", how="left").select(
            pl.col("gpu").alias("gpu_uuid"),
            "node",
            "gpu_index",
            "gpu_model",
            "memory_total_bytes",
            "sharing_mode",
            "first_seen",
            "last_seen",
        )
        out["nodes"] = info.group_by("node").agg(
            gpu_model=pl.col("model").first(),
            sharing_mode=pl.col("sharing_mode").first(),
            first_seen=pl.col("ts").min(),
            last_seen=pl.col("ts").max(),
        )
    return out


# -- dcgm-exporter naming ------------------------------------------------------------------------


def normalize_dcgm_labels(long: pl.DataFrame) -> pl.DataFrame:
    """Rename dcgm-exporter's labels to gpulens's (``UUID``->gpu, ``Hostname``->node, ...)."""
    df = long
    gi = _coalesce(df, "GPU_I_ID").replace("", None)
    uuid = _coalesce(df, "UUID", "uuid")
    mig_device = _coalesce(df, "dra_mig_device_uuid").replace("", None)
    df = df.with_columns(
        node=_coalesce(df, "Hostname", "hostname", "node", "kubernetes_node", "instance"),
        gpu_n=uuid,
        index=_coalesce(df, "gpu"),
        model=_coalesce(df, "modelName"),
        gpu_instance=gi,
        profile=pl.when(gi.is_not_null()).then(_coalesce(df, "GPU_I_PROFILE")).otherwise(pl.lit("gpu")),
        device=pl.when(gi.is_null())
        .then(uuid)
        .otherwise(pl.coalesce(mig_device, pl.format("{}/gi{}", uuid, gi))),
    )
    # Scraped by Prometheus with honor_labels false, the workload's labels become exported_*, and the
    # plain pod/namespace/container of that target are dcgm-exporter's own pod: not a holder.
    plain_pod = _coalesce(df, "pod", "pod_name")
    if "exported_pod" in df.columns:
        target_pods = df.filter(pl.col("exported_pod").is_not_null()).select(plain_pod.unique()).to_series()
        is_target = plain_pod.is_in(target_pods.drop_nulls().implode())
    else:
        is_target = pl.lit(False)

    def workload(label: str, *plain: str) -> pl.Expr:
        mine = pl.when(is_target).then(None).otherwise(_coalesce(df, *plain))
        return pl.coalesce(_coalesce(df, f"exported_{label}"), mine).replace("", None)

    df = df.with_columns(
        namespace=workload("namespace", "namespace", "pod_namespace"),
        pod=workload("pod", "pod", "pod_name"),
        container=workload("container", "container", "container_name"),
    )
    return df.drop("gpu").rename({"gpu_n": "gpu"}).filter(pl.col("gpu").is_not_null())


def dcgm_in_base_units(df: pl.DataFrame) -> pl.DataFrame:
    """Each ingested dcgm sample under its field's key, its value converted by the name it was read under."""
    keys = {name: field.key for name, (field, _) in READ_AS.items()}
    scales = {name: unit.scale for name, (_, unit) in READ_AS.items()}
    return df.with_columns(
        value=pl.col("value") * pl.col("metric").replace_strict(scales, default=1.0, return_dtype=pl.Float64),
        metric=pl.col("metric").replace(keys),
    )


def _signal(key: str) -> pl.Expr:
    """The activity signal stored for field ``key``: its pre-4.9 name, whatever generation served it."""
    return pl.lit(BY_KEY[key].legacy)


def map_dcgm(df: pl.DataFrame, source: str) -> dict[str, pl.DataFrame]:
    """Store frames from dcgm-exporter series of any generation (labels already normalized)."""
    df = dcgm_in_base_units(df).with_columns(_TS)
    per_device = df.group_by("device", "ts").agg(
        node=pl.col("node").first(),
        gpu_uuid=pl.col("gpu").first(),
        gpu_instance=pl.col("gpu_instance").first(),
        profile=pl.col("profile").first(),
        model=pl.col("model").first(),
        index=pl.col("index").first(),
        gr=_first("gr_engine"),
        sm=_first("sm_active"),
        util=_first("gpu_util"),
        used=_first("fb_used"),
        free=_first("fb_free"),
        reserved=_first("fb_reserved"),
        capacity=_first("fb_total"),
    )
    per_device = per_device.with_columns(
        # profiling fields first: GPU_UTIL is a duty cycle that overstates compute need
        activity_ratio=pl.coalesce(pl.col("gr"), pl.col("sm"), pl.col("util")),
        activity_signal=pl.when(pl.col("gr").is_not_null()).then(_signal("gr_engine"))
        .when(pl.col("sm").is_not_null()).then(_signal("sm_active"))
        .when(pl.col("util").is_not_null()).then(_signal("gpu_util")),
        memory_used_bytes=pl.col("used").round(0).cast(pl.Int64),
        memory_total_bytes=pl.coalesce(pl.col("used") + pl.col("free") + pl.col("reserved").fill_null(0),
                                       pl.col("capacity"))
        .round(0)
        .cast(pl.Int64),
        is_mig=pl.col("gpu_instance").is_not_null(),
    )
    device_samples = per_device.select(
        "ts",
        "node",
        "gpu_uuid",
        pl.col("device").alias("device_id"),
        "activity_ratio",
        "memory_used_bytes",
        "memory_total_bytes",
        pl.lit(source).alias("source"),
        "activity_signal",
    )
    # Physical readings are per GPU: MIG instances repeat them, the first series of each GPU wins.
    phys = df.group_by("gpu", "ts").agg(
        node=pl.col("node").first(),
        power_watts=_first("power"),
        energy_joules=_first("energy"),
        temperature_celsius=_first("temperature"),
        sm_clock_hz=_first("sm_clock"),
        memory_clock_hz=_first("memory_clock"),
        ecc_corrected_total=_first("ecc_sbe"),
        ecc_uncorrected_total=_first("ecc_dbe"),
        retired_pages_total=_first("retired_sbe") + _first("retired_dbe"),
        remap=_first("row_remap_failed"),
        pcie_replay_total=_first("pcie_replay"),
        nvlink_crc_errors_total=_first("nvlink_crc_flit"),
    )
    ints = ("ecc_corrected_total", "ecc_uncorrected_total", "retired_pages_total", "pcie_replay_total",
            "nvlink_crc_errors_total")
    gpu_samples = phys.select(
        "ts",
        "node",
        pl.col("gpu").alias("gpu_uuid"),
        pl.lit(True).alias("up"),
        "power_watts",
        "energy_joules",
        "temperature_celsius",
        "sm_clock_hz",
        "memory_clock_hz",
        *[pl.col(c).round(0).cast(pl.Int64) for c in ints],
        (pl.col("remap") == 1).alias("remapped_rows_failure"),
        pl.lit(source).alias("source"),
    )
    slices = pl.when(pl.col("is_mig")).then(_slices(pl.col("profile"))).otherwise(7)
    sharing = pl.when(pl.col("is_mig")).then(pl.lit("mig")).otherwise(pl.lit("exclusive"))
    held = (
        df.filter(pl.col("pod").is_not_null())
        .select("device", "ts", "namespace", "pod", "container")
        .unique(["device", "ts", "namespace", "pod", "container"])
    )
    allocations = held.join(per_device.select("device", "ts", "node", "gpu_uuid", "is_mig", "profile"),
                            on=["device", "ts"]).select(
        "ts",
        "node",
        "gpu_uuid",
        pl.col("device").alias("device_id"),
        pl.col("namespace").fill_null(""),
        "pod",
        pl.col("container").fill_null(""),
        pl.col("namespace").fill_null("").alias("tenant"),
        sharing.alias("sharing_mode"),
        (slices / COMPUTE_SLICES).alias("gpu_equivalents"),
        pl.lit(source).alias("source"),
    )
    # DCGM_FI_DEV_XID_ERRORS (4.9+: DCGM_FI_DEV_XID_ERROR) is "the last XID seen": an event where it
    # changes to a non-zero code.
    xid = (
        df.filter(pl.col("metric") == "xid")
        .group_by("gpu", "ts")
        .agg(node=pl.col("node").first(), code=pl.col("value").first())
        .sort("gpu", "ts")
        .with_columns(prev=pl.col("code").shift(1).over("gpu"))
        .filter((pl.col("code") != 0) & (pl.col("prev").is_null() | (pl.col("prev") != pl.col("code"))))
    )
    events = xid.select(
        "ts",
        "node",
        pl.col("gpu").alias("gpu_uuid"),
        pl.lit(None, dtype=pl.Utf8).alias("device_id"),
        pl.lit("xid").alias("kind"),
        pl.col("code").cast(pl.Int32),
        pl.lit(1, dtype=pl.Int64).alias("count"),
        pl.lit("dcgm last-xid gauge changed").alias("detail"),
        pl.lit(source).alias("source"),
    )
    devices = per_device.group_by("device").agg(
        gpu_uuid=pl.col("gpu_uuid").first(),
        node=pl.col("node").first(),
        gpu_model=pl.col("model").first(),
        is_mig=pl.col("is_mig").first(),
        profile=pl.col("profile").first(),
        gpu_instance_id=pl.col("gpu_instance").first().cast(pl.Int32, strict=False),
        memory_total_bytes=pl.col("memory_total_bytes").max(),
        first_seen=pl.col("ts").min(),
        last_seen=pl.col("ts").max(),
    ).with_columns(slices=slices)
    devices = devices.select(
        pl.col("device").alias("device_id"),
        "gpu_uuid",
        "node",
        "gpu_model",
        pl.when(pl.col("is_mig")).then(pl.lit("mig")).otherwise(pl.lit("gpu")).alias("kind"),
        "profile",
        "gpu_instance_id",
        "slices",
        (pl.col("slices") / COMPUTE_SLICES).alias("gpu_equivalents"),
        "memory_total_bytes",
        sharing.alias("sharing_mode"),
        "first_seen",
        "last_seen",
    )
    gpus = per_device.group_by("gpu_uuid").agg(
        node=pl.col("node").first(),
        gpu_index=pl.col("index").first().cast(pl.Int32, strict=False),
        gpu_model=pl.col("model").first(),
        any_mig=pl.col("is_mig").any(),
        whole_total=pl.col("memory_total_bytes").filter(~pl.col("is_mig")).max(),
        first_seen=pl.col("ts").min(),
        last_seen=pl.col("ts").max(),
    ).select(
        "gpu_uuid",
        "node",
        "gpu_index",
        "gpu_model",
        pl.col("whole_total").alias("memory_total_bytes"),
        pl.when(pl.col("any_mig")).then(pl.lit("mig")).otherwise(pl.lit("exclusive")).alias("sharing_mode"),
        "first_seen",
        "last_seen",
    )
    nodes = per_device.group_by("node").agg(
        gpu_model=pl.col("model").first(), first_seen=pl.col("ts").min(), last_seen=pl.col("ts").max()
    )
    return {
        "device_samples": device_samples,
        "gpu_samples": gpu_samples,
        "allocations": allocations,
        "events": events,
        "devices": devices,
        "gpus": gpus,
        "nodes": nodes,
    }
