"""Fleet overview: capacity, allocation and activity of every GPU, in GPU-equivalents (GE)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards.grafana.builders import (
    GE_UNIT,
    IDLE_THRESHOLD,
    bargauge_panel,
    new_dashboard,
    query,
    stat_panel,
    table_panel,
    timeseries_panel,
)
from gpulens.core import metric_catalog as M

UID = "gpulens-fleet"


def build() -> dashboard.Dashboard:
    return (
        new_dashboard(
            UID,
            "gpulens / Fleet overview",
            "Capacity, allocation and measured activity of the GPU fleet in GPU-equivalents "
            "(1 per whole GPU, g/7 per MIG instance). Needs the gpulens recording rules.",
        )
        .with_row(dashboard.Row("Now"))
        .with_panel(stat_panel(
            "GPUs answering", "GPUs whose NVML readings work, of all GPUs known.", "none",
            query(f"sum(cluster:{M.GPU_UP.name}:sum)", "up", instant=True),
            query("sum(cluster:gpulens_gpus:count)", "known", instant=True),
        ))
        .with_panel(stat_panel(
            "Capacity", "GPU-equivalents of all allocatable devices.", GE_UNIT,
            query(f"sum(cluster:{M.DEVICE_GPU_EQUIVALENTS.name}:sum)", "capacity", instant=True),
        ))
        .with_panel(stat_panel(
            "Allocated", "Share of the capacity held by pods.", "percentunit",
            query(
                f"sum(cluster:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum) / sum(cluster:{M.DEVICE_GPU_EQUIVALENTS.name}:sum)",
                "allocated", instant=True,
            ),
        ))
        .with_panel(stat_panel(
            "Active", "Allocated share x measured activity (a lower bound where activity is unmeasured).",
            GE_UNIT,
            query(f"sum(cluster:{M.TENANT_ACTIVE_GPU_EQUIVALENTS.name}:sum)", "active", instant=True),
        ))
        .with_panel(stat_panel(
            "Unmeasured", "Allocated GE whose activity the hardware cannot report (A100 MIG).", GE_UNIT,
            query(f"sum(cluster:{M.TENANT_UNMEASURED_GPU_EQUIVALENTS.name}:sum)", "unmeasured", instant=True),
        ))
        .with_panel(stat_panel(
            "Idle (allocated)", f"Allocated GE on devices whose activity is below {IDLE_THRESHOLD:g} (as analyze decides idle).",
            GE_UNIT,
            query("sum(tenant:gpulens_idle_gpu_equivalents:sum)", "idle", instant=True),
        ))
        .with_row(dashboard.Row("Over time"))
        .with_panel(timeseries_panel(
            "Capacity, allocated and active", "Fleet GE over time.", GE_UNIT,
            query(f"sum(cluster:{M.DEVICE_GPU_EQUIVALENTS.name}:sum)", "capacity"),
            query(f"sum(cluster:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum)", "allocated"),
            query(f"sum(cluster:{M.TENANT_ACTIVE_GPU_EQUIVALENTS.name}:sum)", "active"),
            query(f"sum(cluster:{M.TENANT_UNMEASURED_GPU_EQUIVALENTS.name}:sum)", "unmeasured"),
        ))
        .with_panel(timeseries_panel(
            "Idle GE by tenant", f"Allocated GE on devices whose activity is below {IDLE_THRESHOLD:g}, stacked by tenant.", GE_UNIT,
            query("sort_desc(tenant:gpulens_idle_gpu_equivalents:sum)", "{{tenant}}"),
            stacked=True,
        ))
        .with_panel(timeseries_panel(
            "Allocated GE by GPU model", "Allocated and total GE per GPU model.", GE_UNIT,
            query(f"sum by (model) (model:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum)", "{{model}} allocated"),
            query(f"sum by (model) (model:{M.DEVICE_GPU_EQUIVALENTS.name}:sum)", "{{model}} capacity"),
        ))
        .with_panel(bargauge_panel(
            "Free devices by shape", "Devices nobody holds, per GPU model and profile (fragmentation input).",
            "none",
            query("sum by (model, profile) (model_profile:gpulens_unallocated_devices:count)",
                  "{{model}} {{profile}}", instant=True),
        ))
        .with_row(dashboard.Row("Tenants and health"))
        .with_panel(table_panel(
            "Top tenants by allocated GE", "The ten tenants holding the most GE now.", GE_UNIT,
            query(f"topk(10, sum by (tenant) (tenant:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum))", "",
                  instant=True, as_table=True),
            span=12,
        ))
        .with_panel(table_panel(
            "Jobs spanning more blocks than needed",
            "Multi-GPU workloads whose GPUs sit in more network blocks than ceil(GPUs / largest block): the value "
            "is the blocks spanned. Needs kube-state-metrics node labels (docs/alerts.md).", "none",
            query("workload:gpulens_blocks_spanned:count > workload:gpulens_blocks_needed:ceil", "",
                  instant=True, as_table=True),
            span=12,
        ))
        .with_panel(table_panel(
            "Lost GPUs", f"GPUs that stopped answering ({M.GPU_UP.name} == 0).", "none",
            query(f"{M.GPU_UP.name} == 0", "", instant=True, as_table=True),
            span=12,
        ))
    )
