"""Node / GPU / MIG detail: per-GPU physical readings, per-device activity and memory, health, exporter."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from gpulens.dashboards.grafana.builders import (
    GE_UNIT,
    label_variable,
    new_dashboard,
    node_variable,
    query,
    stat_panel,
    table_panel,
    timeseries_panel,
)

UID = "gpulens-node"
N = 'node=~"$node"'
NG = 'node=~"$node", gpu=~"$gpu"'


def gpu_variable() -> dashboard.QueryVariable:
    return label_variable(
        "gpu", "GPU", 'label_values(gpulens_gpu_info{node=~"$node"}, gpu)', "Physical GPUs (UUIDs) of the nodes."
    )


def build() -> dashboard.Dashboard:
    return (
        new_dashboard(
            UID,
            "gpulens / Node, GPU and MIG detail",
            "Per-GPU physical readings, per-device (whole GPU or MIG instance) activity and memory, "
            "health counters and the exporter's own state.",
        )
        .with_variable(node_variable())
        .with_variable(gpu_variable())
        .with_row(dashboard.Row("Inventory"))
        .with_panel(table_panel(
            "GPUs", "Model, sharing mode and driver of each GPU (gpulens_gpu_info).", "none",
            query(f"gpulens_gpu_info{{{NG}}}", "", instant=True, as_table=True),
            span=12,
        ))
        .with_panel(table_panel(
            "Devices", "Allocatable devices: whole GPUs and MIG instances with their GE.", GE_UNIT,
            query(f"gpulens_device_gpu_equivalents{{{NG}}}", "", instant=True, as_table=True),
            span=12,
        ))
        .with_panel(table_panel(
            "Allocations on these GPUs", "Containers holding the devices, with their share.", GE_UNIT,
            query(
                "sum by (node, gpu, device, profile, tenant, namespace, pod, container, sharing_mode)"
                f" (gpulens_allocation_gpu_equivalents{{{NG}}})",
                "", instant=True, as_table=True,
            ),
        ))
        .with_row(dashboard.Row("Topology"))
        .with_panel(table_panel(
            "NUMA and fabric", "NUMA node and close CPUs of each GPU, and its NVLink fabric clique where it has one "
            "(absent where NVML gives none).", "none",
            query(f"gpulens_gpu_numa_info{{{NG}}}", "", instant=True, as_table=True),
            query(f"gpulens_gpu_fabric_info{{{NG}}}", "", instant=True, as_table=True),
            span=12,
        ))
        .with_panel(table_panel(
            "NVLink", "Links up and down per GPU, and NVLink peers (P2P over NVLink ok) of each GPU.", "none",
            query(f"gpulens_gpu_nvlink_links{{{NG}}}", "", instant=True, as_table=True),
            query(f'count by (node, gpu, nvlink_domain) (gpulens_gpu_peer_info{{{NG}, p2p_nvlink="ok"}})', "",
                  instant=True, as_table=True),
            span=12,
        ))
        .with_row(dashboard.Row("Activity and memory per device"))
        .with_panel(timeseries_panel(
            "Device activity", "Graphics-engine activity per device (GPM per MIG instance on Hopper).",
            "percentunit",
            query(f"gpulens_device_activity_ratio{{{NG}}}", "{{node}} {{device}} {{profile}}"),
        ))
        .with_panel(timeseries_panel(
            "Memory used", "Share of memory in use per whole GPU or MIG GPU instance.", "percentunit",
            query(
                f"gpulens_device_memory_used_bytes{{{NG}}} / (gpulens_device_memory_total_bytes{{{NG}}} > 0)",
                "{{node}} {{device}} {{profile}}",
            ),
        ))
        .with_panel(timeseries_panel(
            "Tenants on these nodes", "Allocated and active GE per tenant on the selected nodes.", GE_UNIT,
            query(f"sum by (node, tenant) (gpulens_tenant_allocated_gpu_equivalents{{{N}}})", "{{node}} {{tenant}}"),
            query(f"sum by (node, tenant) (gpulens_tenant_active_gpu_equivalents{{{N}}})",
                  "{{node}} {{tenant}} active"),
            query(f"sum by (node, tenant) (gpulens_tenant_unmeasured_gpu_equivalents{{{N}}})",
                  "{{node}} {{tenant}} unmeasured"),
        ))
        .with_panel(timeseries_panel(
            "Devices per tenant", "Devices each tenant holds on the selected nodes.", "none",
            query(f"sum by (node, tenant) (gpulens_tenant_devices{{{N}}})", "{{node}} {{tenant}}"),
        ))
        .with_row(dashboard.Row("Power, temperature and clocks per GPU"))
        .with_panel(timeseries_panel(
            "Power", "Power draw, and the rate of the energy counter.", "watt",
            query(f"gpulens_gpu_power_watts{{{NG}}}", "{{node}} {{gpu}}"),
            query(f"rate(gpulens_gpu_energy_joules_total{{{NG}}}[$__rate_interval])", "{{node}} {{gpu}} (energy rate)"),
            span=8,
        ))
        .with_panel(timeseries_panel(
            "Temperature", "GPU core temperature.", "celsius",
            query(f"gpulens_gpu_temperature_celsius{{{NG}}}", "{{node}} {{gpu}}"),
            span=8,
        ))
        .with_panel(timeseries_panel(
            "Clocks", "SM and memory clocks.", "hertz",
            query(f"gpulens_gpu_sm_clock_hertz{{{NG}}}", "{{node}} {{gpu}} SM"),
            query(f"gpulens_gpu_memory_clock_hertz{{{NG}}}", "{{node}} {{gpu}} memory"),
            span=8,
        ))
        .with_panel(timeseries_panel(
            "Active throttle reasons", "Clock-event reasons that are active (1).", "none",
            query(f"gpulens_gpu_throttle_active{{{NG}}} == 1", "{{node}} {{gpu}} {{reason}}"),
        ))
        .with_panel(timeseries_panel(
            "Thermal violation", "Share of time clock-limited by thermal violations.", "percentunit",
            query(f"rate(gpulens_gpu_thermal_violation_seconds_total{{{NG}}}[$__rate_interval])", "{{node}} {{gpu}}"),
        ))
        .with_row(dashboard.Row("Health"))
        .with_panel(table_panel(
            "XIDs in the time range", "XID events by code, with when each was last seen.", "none",
            query(f"increase(gpulens_gpu_xid_errors_total{{{NG}}}[$__range]) > 0", "", instant=True, as_table=True),
            query(f"gpulens_gpu_xid_last_seen_timestamp_seconds{{{NG}}} * 1000", "", instant=True, as_table=True),
            span=12,
        ))
        .with_panel(table_panel(
            "Memory health", "Row-remap failure (1 = drain) and retired pages (63 or more = drain).", "none",
            query(f"gpulens_gpu_row_remap_failed{{{NG}}}", "", instant=True, as_table=True),
            query(f"gpulens_gpu_retired_pages{{{NG}}}", "", instant=True, as_table=True),
            span=12,
        ))
        .with_panel(timeseries_panel(
            "ECC errors per hour", "Corrected (single-bit) and uncorrected (double-bit) ECC errors.", "none",
            query(f"increase(gpulens_gpu_ecc_errors_total{{{NG}}}[1h])", "{{node}} {{gpu}} {{type}}"),
            span=8,
        ))
        .with_panel(timeseries_panel(
            "PCIe replays and NVLink CRC errors", "Per-second rates of the link error counters.", "ops",
            query(f"rate(gpulens_gpu_pcie_replay_total{{{NG}}}[$__rate_interval])", "{{node}} {{gpu}} PCIe replay"),
            query(f"rate(gpulens_gpu_nvlink_crc_errors_total{{{NG}}}[$__rate_interval])", "{{node}} {{gpu}} NVLink CRC"),
            span=8,
        ))
        .with_panel(timeseries_panel(
            "GPU up", "1 while the GPU answers, 0 when it is lost.", "none",
            query(f"gpulens_gpu_up{{{NG}}}", "{{node}} {{gpu}}"),
            span=8,
        ))
        .with_row(dashboard.Row("Exporter"))
        .with_panel(timeseries_panel(
            "Collection cycle", "Wall time of the last cycle, and age of the last successful one.", "s",
            query(f"gpulens_exporter_cycle_duration_seconds{{{N}}}", "{{node}} duration"),
            query(f"time() - gpulens_exporter_last_success_timestamp_seconds{{{N}}}", "{{node}} age"),
            span=8,
        ))
        .with_panel(timeseries_panel(
            "Cycles and errors", "Cycles per second and errors per second by source.", "ops",
            query(f"rate(gpulens_exporter_cycles_total{{{N}}}[$__rate_interval])", "{{node}} cycles"),
            query(f"sum by (node, source) (rate(gpulens_exporter_errors_total{{{N}}}[$__rate_interval]))",
                  "{{node}} errors {{source}}"),
            span=8,
        ))
        .with_panel(stat_panel(
            "Exporter versions", "Exporters per version and device backend.", "none",
            query("count by (version, backend) (gpulens_exporter_build_info)", "{{version}} {{backend}}", instant=True),
            span=8, height=8,
        ))
    )
