"""dcgm-exporter fleet: activity, memory, power and health of GPUs watched by dcgm-exporter alone.

For clusters that run NVIDIA's dcgm-exporter and no gpulens exporter. Every query reads the records of
group ``gpulens.dcgm.rules`` (deploy/prometheus), which coalesce dcgm-exporter's names of before and
after 4.9 into base units, so the dashboard is the same on either generation, and during an upgrade.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard, stat

from collector.dcgm_records import BY_KEY
from dashboards.grafana.builders import (
    label_variable,
    new_dashboard,
    query,
    stat_panel,
    table_panel,
    timeseries_panel,
)

UID = "gpulens-dcgm"
NG = 'node=~"$node", UUID=~"$gpu"'
EMPTY = '""'


def record(key: str, selector: str = NG) -> str:
    """The record of dcgm field ``key`` (collector/dcgm_fields.py), filtered by the node and GPU variables."""
    return f"{BY_KEY[key].record}{{{selector}}}"


def activity(selector: str = NG) -> str:
    """Graphics-engine activity, else SM activity, else GPU_UTIL, per device (the collector's preference)."""
    return " or ".join(record(k, selector) for k in ("gr_engine", "sm_active", "gpu_util"))


def node_variable() -> dashboard.QueryVariable:
    return label_variable("node", "Node", f"label_values({BY_KEY['power'].record}, node)",
                          "Nodes whose dcgm-exporter reports GPUs.")


def gpu_variable() -> dashboard.QueryVariable:
    return label_variable("gpu", "GPU", f'label_values({BY_KEY["power"].record}{{node=~"$node"}}, UUID)',
                          "Physical GPUs (UUIDs) of the nodes.")


PER_GPU = "max by (node, UUID)"
"""Physical readings once per GPU (dcgm-exporter repeats them on every MIG instance)."""


def gpus_where(title: str, description: str, key: str, condition: str) -> stat.Panel:
    """A stat of how many GPUs have field ``key`` meeting ``condition`` (0, not empty, when none)."""
    return stat_panel(title, description, "none",
                      query(f"count({PER_GPU} ({record(key)}) {condition}) or vector(0)", instant=True))


def build() -> dashboard.Dashboard:
    per_gpu = PER_GPU
    return (
        new_dashboard(
            UID,
            "gpulens / dcgm-exporter fleet",
            "GPUs watched by NVIDIA dcgm-exporter, without a gpulens exporter: activity, memory, power and "
            "health, the same on dcgm-exporter before 4.9 and after (records of gpulens.dcgm.rules).",
        )
        .with_variable(node_variable())
        .with_variable(gpu_variable())
        .with_row(dashboard.Row("Fleet"))
        .with_panel(stat_panel(
            "GPUs", "Physical GPUs reporting power.", "none",
            query(f"count(count by (node, UUID) ({record('power')}))", instant=True),
        ))
        .with_panel(stat_panel(
            "Mean activity", "Mean activity of the devices (graphics engine, else SM, else GPU_UTIL).", "percentunit",
            query(f"avg({activity()})", instant=True),
        ))
        .with_panel(stat_panel(
            "Memory used", "Framebuffer used over framebuffer total, all devices.", "percentunit",
            query(f"sum({record('fb_used')}) / sum({record('fb_total')} or {record('fb_used')} + "
                  f"{record('fb_free')} + {record('fb_reserved')})", instant=True),
        ))
        .with_panel(stat_panel(
            "Power", "Power drawn by the GPUs (each GPU once, MIG instances repeat it).", "watt",
            query(f"sum({per_gpu} ({record('power')}))", instant=True),
        ))
        .with_panel(gpus_where("GPUs with a row-remap failure",
                               "GPUs that failed to remap a memory row: drain and replace.", "row_remap_failed", "== 1"))
        .with_panel(gpus_where("Last XIDs", "GPUs whose last XID is not 0.", "xid", "> 0"))
        .with_row(dashboard.Row("Activity and memory per device"))
        .with_panel(timeseries_panel(
            "Device activity", "Per whole GPU or MIG instance (GPU_I_ID).", "percentunit",
            query(activity(), "{{node}} {{UUID}} {{GPU_I_ID}}"),
        ))
        .with_panel(timeseries_panel(
            "Memory used", "Framebuffer used per device.", "bytes",
            query(record("fb_used"), "{{node}} {{UUID}} {{GPU_I_ID}}"),
        ))
        .with_panel(table_panel(
            "Activity by pod", "Mean activity of the devices each pod holds (pods dcgm-exporter attributes).",
            "percentunit",
            query(f"avg by (namespace, pod) ({activity(NG + ', pod!=' + EMPTY)})", "", instant=True, as_table=True),
        ))
        .with_row(dashboard.Row("Physical readings per GPU"))
        .with_panel(timeseries_panel(
            "Power", "Power per GPU.", "watt", query(f"{per_gpu} ({record('power')})", "{{node}} {{UUID}}"), span=8,
        ))
        .with_panel(timeseries_panel(
            "Temperature", "GPU temperature.", "celsius",
            query(f"{per_gpu} ({record('temperature')})", "{{node}} {{UUID}}"), span=8,
        ))
        .with_panel(timeseries_panel(
            "Clocks", "SM and memory clocks.", "hertz",
            query(f"{per_gpu} ({record('sm_clock')})", "SM {{node}} {{UUID}}"),
            query(f"{per_gpu} ({record('memory_clock')})", "memory {{node}} {{UUID}}"), span=8,
        ))
        .with_panel(timeseries_panel(
            "Energy per hour", "Energy drawn per GPU, per hour.", "joule",
            query(f"{per_gpu} (increase({record('energy')}[1h]))", "{{node}} {{UUID}}"),
        ))
        .with_row(dashboard.Row("Health"))
        .with_panel(table_panel(
            "Health counters", "Per GPU: last XID, row-remap failure, retired pages, ECC errors, PCIe replays, "
            "NVLink CRC errors.", "none",
            *(query(f"{per_gpu} ({record(key)})", key, instant=True, as_table=True) for key in (
                "xid", "row_remap_failed", "retired_sbe", "retired_dbe", "ecc_sbe", "ecc_dbe", "pcie_replay",
                "nvlink_crc_flit")),
        ))
    )
