"""Chargeback: cost of allocated GPU-equivalents (GE) per tenant, at the price book's price per GPU model.

Cost over the time range = mean allocated GE per GPU model x hours in the range x that model's price paid,
``gpulens:price_usd_per_gpu_hour`` (the recording rules ``gpulens prices rules`` writes from the price book:
the same prices ``gpulens analyze`` and the report use). A model without a price has no price series, so
its cost is absent, never zero. Idle GE carry no model: they are priced at the tenant's mean price per
allocated GE. Money is in US dollars; the store's chargeback (``gpulens report``) is the authoritative,
reconciled one, this dashboard the live view of the same allocation.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard

from dashboards.grafana.builders import (
    GE_UNIT,
    bargauge_panel,
    new_dashboard,
    query,
    stat_panel,
    table_panel,
    tenant_variable,
    timeseries_panel,
)
from dashboards.grafana.price_rules import PRICE_SERIES
from gpulens.core import metric_catalog as M

UID = "gpulens-chargeback"
T = 'tenant=~"$tenant"'
HOURS = "($__range_s / 3600)"
USD = "currencyUSD"
"""Grafana's unit for US dollars: the price book's currency."""
ALLOCATED_BY_MODEL = f"tenant_model_profile:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum"


def priced(ge_by_model: str, by: str) -> str:
    """``ge_by_model`` (series with a ``model`` label) x the model's price, summed ``by`` the given labels."""
    return f"sum by ({by}) ({ge_by_model} * on (model) group_left () {PRICE_SERIES})"


def ge_hours(record: str) -> str:
    """GE-hours of a per-tenant recording rule over the dashboard's time range."""
    return f"sum by (tenant) (avg_over_time({record}{{{T}}}[$__range])) * {HOURS}"


def build() -> dashboard.Dashboard:
    allocated = ge_hours(f"tenant:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum")
    idle = ge_hours("tenant:gpulens_idle_gpu_equivalents:sum")
    cost = f"{priced(f'avg_over_time({ALLOCATED_BY_MODEL}{{{T}}}[$__range])', 'tenant')} * {HOURS}"
    rate = priced(f"{ALLOCATED_BY_MODEL}{{{T}}}", "tenant")
    usd_per_ge = f"({rate} / sum by (tenant) (tenant:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum{{{T}}}))"
    idle_cost = f"{idle} * on (tenant) group_left () {usd_per_ge}"
    return (
        new_dashboard(
            UID,
            "gpulens / Chargeback",
            "Cost in US dollars of allocated GPU-equivalents per tenant over the time range, each GPU model at "
            "the price book's price paid (gpulens:price_usd_per_gpu_hour from `gpulens prices rules`; an unpriced "
            "model has no cost shown); idle cost is the part spent on allocated but measurably idle devices.",
        )
        .with_variable(tenant_variable())
        .with_row(dashboard.Row("Over the time range"))
        .with_panel(stat_panel(
            "Total cost", "Allocated GE-hours x each model's price, all selected tenants (USD).", USD,
            query(f"sum({cost})", "cost", instant=True),
            span=6,
        ))
        .with_panel(stat_panel(
            "Idle cost", "Allocated but measurably idle GE-hours at each tenant's mean price per GE (USD).", USD,
            query(f"sum({idle_cost})", "idle cost", instant=True),
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
            "Cost by tenant", "GE-hours, cost and idle cost (USD) per tenant over the time range.", USD,
            query(f"{allocated}", "", instant=True, as_table=True),
            query(cost, "", instant=True, as_table=True),
            query(idle_cost, "", instant=True, as_table=True),
            span=12,
        ))
        .with_panel(bargauge_panel(
            "Cost by tenant and profile", "Where the money goes (USD): whole GPUs and each MIG profile.", USD,
            query(
                f"{priced(f'avg_over_time({ALLOCATED_BY_MODEL}{{{T}}}[$__range])', 'tenant, profile')} * {HOURS}",
                "{{tenant}} {{profile}}", instant=True,
            ),
        ))
        .with_row(dashboard.Row("Rate"))
        .with_panel(timeseries_panel(
            "Cost per hour by tenant", "Allocated GE x each model's price: USD per hour each tenant spends now.", USD,
            query(rate, "{{tenant}}"),
            stacked=True,
        ))
        .with_panel(timeseries_panel(
            "Idle cost per hour by tenant", "Idle GE x the tenant's mean price per GE (USD per hour).", USD,
            query(f"tenant:gpulens_idle_gpu_equivalents:sum{{{T}}} * on (tenant) group_left () {usd_per_ge}", "{{tenant}}"),
            stacked=True,
        ))
        .with_panel(timeseries_panel(
            "Allocated GE by tenant", "The allocation the cost is computed from.", GE_UNIT,
            query(f"tenant:{M.ALLOCATION_GPU_EQUIVALENTS.name}:sum{{{T}}}", "{{tenant}}"),
            span=24,
        ))
    )
