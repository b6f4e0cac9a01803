"""Chargeback: cost of allocated GPU-equivalents (GE) per tenant, at a price per GE-hour.

Cost over the time range = mean allocated GE x hours in the range x price. The price is a dashboard
variable (type a number in your currency); the gpulens store computes the authoritative chargeback
with per-model prices (``gpulens report``), this dashboard is the live view of the same allocation.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from gpulens.core import metric_catalog as M
from gpulens.dashboards.grafana.builders import (
    GE_UNIT,
    bargauge_panel,
    new_dashboard,
    query,
    stat_panel,
    table_panel,
    tenant_variable,
    timeseries_panel,
)

UID = "gpulens-chargeback"
T = 'tenant=~"$tenant"'
HOURS = "($__range_s / 3600)"
PRICE = "$price_per_gpu_hour"


def price_variable() -> dashboard.TextBoxVariable:
    return (
        dashboard.TextBoxVariable("price_per_gpu_hour")
        .label("Price per GPU-hour")
        .description("Price of one whole GPU for one hour (a MIG 1g instance costs 1/7 of it).")
        .default_value("2.50")
    )


def ge_hours(record: str) -> str:
    """GE-hours of a per-tenant recording rule over the dashboard's time range."""
    return f"sum by (tenant) (avg_over_time({record}{{{T}}}[$__range])) * {HOURS}"


def build() -> dashboard.Dashboard:
    allocated = ge_hours(f"tenant:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum")
    idle = ge_hours("tenant:gpulens_idle_gpu_equivalents:sum")
    return (
        new_dashboard(
            UID,
            "gpulens / Chargeback",
            "Cost of allocated GPU-equivalents per tenant over the time range, at the price per GPU-hour "
            "set above; idle cost is the part spent on allocated but measurably idle devices.",
        )
        .with_variable(tenant_variable())
        .with_variable(price_variable())
        .with_row(dashboard.Row("Over the time range"))
        .with_panel(stat_panel(
            "Total cost", "Allocated GE-hours x price, all selected tenants.", "none",
            query(f"sum({allocated}) * {PRICE}", "cost", instant=True),
            span=6,
        ))
        .with_panel(stat_panel(
            "Idle cost", "Cost of allocated but measurably idle GE.", "none",
            query(f"sum({idle}) * {PRICE}", "idle cost", instant=True),
            span=6,
        ))
        .with_panel(stat_panel(
            "Allocated GE-hours", "GPU-hours held by the selected tenants.", "none",
            query(f"sum({allocated})", "GE-hours", instant=True),
            span=6,
        ))
        .with_panel(stat_panel(
            "Idle share", "Idle GE-hours / allocated GE-hours.", "percentunit",
            query(f"sum({idle}) / sum({allocated})", "idle share", instant=True),
            span=6,
        ))
        .with_panel(table_panel(
            "Cost by tenant", "GE-hours, cost and idle cost per tenant over the time range.", "none",
            query(f"{allocated}", "", instant=True, as_table=True),
            query(f"{allocated} * {PRICE}", "", instant=True, as_table=True),
            query(f"{idle} * {PRICE}", "", instant=True, as_table=True),
            span=12,
        ))
        .with_panel(bargauge_panel(
            "Cost by tenant and profile", "Where the money goes: whole GPUs and each MIG profile.", "none",
            query(
                "sum by (tenant, profile) (avg_over_time("
                f"tenant_profile:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum{{{T}}}[$__range])) * {HOURS} * {PRICE}",
                "{{tenant}} {{profile}}", instant=True,
            ),
        ))
        .with_row(dashboard.Row("Rate"))
        .with_panel(timeseries_panel(
            "Cost per hour by tenant", "Allocated GE x price: what each tenant is spending per hour now.", "none",
            query(f"tenant:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum{{{T}}} * {PRICE}", "{{tenant}}"),
            stacked=True,
        ))
        .with_panel(timeseries_panel(
            "Idle cost per hour by tenant", "Idle GE x price per tenant.", "none",
            query(f"tenant:gpulens_idle_gpu_equivalents:sum{{{T}}} * {PRICE}", "{{tenant}}"),
            stacked=True,
        ))
        .with_panel(timeseries_panel(
            "Allocated GE by tenant", "The allocation the cost is computed from.", GE_UNIT,
            query(f"tenant:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum{{{T}}}", "{{tenant}}"),
            span=24,
        ))
    )
