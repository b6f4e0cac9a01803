"""Tenant dashboard: what each tenant holds, how much of it is active, its pods and its Kueue queue."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards.grafana.builders import (
    GE_UNIT,
    IDLE_THRESHOLD,
    new_dashboard,
    node_variable,
    query,
    stat_panel,
    table_panel,
    tenant_variable,
    timeseries_panel,
)
from gpulens.core import metric_catalog as M

UID = "gpulens-tenant"
T = 'tenant=~"$tenant"'
TN = 'tenant=~"$tenant", node=~"$node"'


def build() -> dashboard.Dashboard:
    return (
        new_dashboard(
            UID,
            "gpulens / Tenant",
            "GPU allocation and activity of the selected tenants, their pods (on the selected nodes), and their Kueue queues.",
        )
        .with_variable(tenant_variable())
        .with_variable(node_variable())
        .with_row(dashboard.Row("Now"))
        .with_panel(stat_panel(
            "Allocated", "GPU-equivalents held by the selected tenants.", GE_UNIT,
            query(f"sum(tenant:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum{{{T}}})", "allocated", instant=True),
        ))
        .with_panel(stat_panel(
            "Devices held", "Whole GPUs, MIG instances or shared replicas.", "none",
            query(f"sum(tenant:{M.TENANT_DEVICES.name}:sum{{{T}}})", "devices", instant=True),
        ))
        .with_panel(stat_panel(
            "Unmeasured", "Allocated GE whose activity the hardware cannot report.", GE_UNIT,
            query(f"sum(tenant:{M.TENANT_UNMEASURED_GPU_EQUIVALENTS.name}:sum{{{T}}})", "unmeasured", instant=True),
        ))
        .with_panel(stat_panel(
            "Idle", f"Allocated GE on devices whose activity is below {IDLE_THRESHOLD:g} (as analyze decides idle).",
            GE_UNIT,
            query(f"sum(tenant:gpulens_idle_gpu_equivalents:sum{{{T}}})", "idle", instant=True),
        ))
        .with_panel(stat_panel(
            "Activity (measured)", "Active GE / measured allocated GE.", "percentunit",
            query(
                f"sum(tenant:{M.TENANT_ACTIVE_GPU_EQUIVALENTS.name}:sum{{{T}}}) / "
                f"(sum(tenant:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum{{{T}}}) - "
                f"(sum(tenant:{M.TENANT_UNMEASURED_GPU_EQUIVALENTS.name}:sum{{{T}}}) or vector(0)))",
                "activity", instant=True,
            ),
            span=8,
        ))
        .with_row(dashboard.Row("Over time"))
        .with_panel(timeseries_panel(
            "Allocated GE", "GE held per tenant.", GE_UNIT,
            query(f"tenant:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum{{{T}}}", "{{tenant}}"),
        ))
        .with_panel(timeseries_panel(
            "Active GE", "Allocated share x measured activity per tenant.", GE_UNIT,
            query(f"tenant:{M.TENANT_ACTIVE_GPU_EQUIVALENTS.name}:sum{{{T}}}", "{{tenant}}"),
        ))
        .with_panel(timeseries_panel(
            "Idle GE", f"Allocated GE on devices whose activity is below {IDLE_THRESHOLD:g}, per tenant.", GE_UNIT,
            query(f"tenant:gpulens_idle_gpu_equivalents:sum{{{T}}}", "{{tenant}}"),
        ))
        .with_panel(timeseries_panel(
            "Unused share of held GE", "Allocated - active - unmeasured (held GE x (1 - activity)): an "
            "efficiency view, not idle.", GE_UNIT,
            query(f"tenant:gpulens_unused_gpu_equivalents:sum{{{T}}}", "{{tenant}}"),
        ))
        .with_panel(timeseries_panel(
            "Activity of the measured allocation", "Active / (allocated - unmeasured) per tenant.", "percentunit",
            query(f"tenant:{M.TENANT_ACTIVE_GPU_EQUIVALENTS.name}:ratio{{{T}}}", "{{tenant}}"),
        ))
        .with_panel(timeseries_panel(
            "Allocated GE by profile", "Whole GPUs and each MIG profile, per tenant.", GE_UNIT,
            query(f"tenant_profile:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum{{{T}}}", "{{tenant}} {{profile}}"),
            query(f"tenant_profile:{M.TENANT_ACTIVE_GPU_EQUIVALENTS.name}:sum{{{T}}}", "{{tenant}} {{profile}} active"),
            span=24,
        ))
        .with_row(dashboard.Row("Pods"))
        .with_panel(table_panel(
            "Pods holding GPU devices", "Each container's share of a device (GE).", GE_UNIT,
            query(
                "sum by (tenant, namespace, pod, container, workload_kind, workload, node, device, profile, sharing_mode)"
                f" ({M.ALLOCATION_GPU_EQUIVALENTS.name}{{{TN}}})",
                "", instant=True, as_table=True,
            ),
        ))
        .with_panel(table_panel(
            "Activity of each pod's device", "Device activity next to the pods that hold the device.",
            "percentunit",
            query(
                "(max by (cluster, node, device, tenant, namespace, pod)"
                f" ({M.ALLOCATION_GPU_EQUIVALENTS.name}{{{TN}}}) > bool 0)"
                " * on (cluster, node, device) group_left () max by (cluster, node, device)"
                f' ({M.DEVICE_ACTIVITY_RATIO.name}{{node=~"$node"}})',
                "", instant=True, as_table=True,
            ),
        ))
        .with_row(dashboard.Row("Kueue (tenant = ClusterQueue)"))
        .with_panel(timeseries_panel(
            "Pending workloads",
            "Kueue's own metric kueue_pending_workloads, by ClusterQueue (matches tenants resolved from Kueue queues).",
            "none",
            query('sum by (cluster_queue, status) (kueue_pending_workloads{cluster_queue=~"$tenant"})',
                  "{{cluster_queue}} {{status}}"),
        ))
        .with_panel(timeseries_panel(
            "GPU quota in use",
            "Kueue usage / nominal quota of nvidia.com/* resources per ClusterQueue and flavor.",
            "percentunit",
            query(
                'kueue_cluster_queue_resource_usage{cluster_queue=~"$tenant", resource=~"nvidia.com/.+"}'
                ' / (kueue_cluster_queue_nominal_quota{cluster_queue=~"$tenant", resource=~"nvidia.com/.+"} > 0)',
                "{{cluster_queue}} {{flavor}} {{resource}}",
            ),
        ))
    )
