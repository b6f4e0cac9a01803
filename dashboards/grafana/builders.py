"""Shared pieces of the gpulens Grafana dashboards (grafana-foundation-sdk builders).

Conventions (kubernetes-mixin style): a ``datasource`` variable of type prometheus that every panel
uses, deterministic ``uid``s, ``id: null``, UTC, one tag (``gpulens``) that links the dashboards.
Tenant and node values are label values, which tenants control: the variables are multi-value with
"All", so Grafana regex-escapes every selected value, and queries only use them in ``=~"$var"``
matchers (checked by tests/test_grafana.py).
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import bargauge, common, dashboard, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_models
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DataSourceRef,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from analytics.settings import DEFAULT_ACTIVITY_THRESHOLD
from gpulens.core import metric_catalog as M

TAG = "gpulens"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
GE_UNIT = "suffix: GE"  # Grafana custom unit: GPU-equivalents
IDLE_THRESHOLD = DEFAULT_ACTIVITY_THRESHOLD
"""The activity below which the idle record counts held GE (analyze's default threshold)."""


def new_dashboard(uid: str, title: str, description: str) -> dashboard.Dashboard:
    """A dashboard with gpulens defaults, the datasource variable and links to its siblings."""
    return (
        dashboard.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags([TAG])
        .timezone("utc")
        .time("now-24h", "now")
        .refresh("1m")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .editable()
        .link(
            dashboard.DashboardLink("gpulens")
            .type(DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
        .with_variable(
            dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
    )


def label_variable(name: str, label: str, query: str, description: str) -> dashboard.QueryVariable:
    """A multi-value label variable with "All" (= ``.*``), refreshed when the time range changes."""
    return (
        dashboard.QueryVariable(name)
        .label(label)
        .description(description)
        .query(query)
        .datasource(DATASOURCE)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
    )


def tenant_variable() -> dashboard.QueryVariable:
    return label_variable(
        "tenant", "Tenant", f"label_values({M.TENANT_ALLOCATED_GPU_EQUIVALENTS.name}, tenant)",
        "Tenants holding GPU devices in the time range.",
    )


def node_variable() -> dashboard.QueryVariable:
    return label_variable(
        "node", "Node", f"label_values({M.GPU_INFO.name}, node)", "Kubernetes nodes with GPUs."
    )


def query(expr: str, legend: str = "", *, instant: bool = False, as_table: bool = False) -> prometheus.Dataquery:
    """A Prometheus query; ``instant`` for stats and tables, ``as_table`` for table format."""
    built = prometheus.Dataquery().expr(expr).legend_format(legend or "__auto")
    if instant:
        built = built.instant()
    else:
        built = built.range()
    if as_table:
        built = built.format(PromQueryFormat.TABLE)
    return built


def _finish(
    panel: Any, title: str, description: str, unit: str, span: int, height: int,
    targets: tuple[prometheus.Dataquery, ...],
) -> Any:
    """Common panel fields, then the targets with ref ids A, B, C..."""
    panel = panel.title(title).description(description).datasource(DATASOURCE).unit(unit).span(span).height(height)
    for index, target in enumerate(targets):
        panel = panel.with_target(target.ref_id(chr(ord("A") + index)))
    return panel


def timeseries_panel(
    title: str,
    description: str,
    unit: str,
    *targets: prometheus.Dataquery,
    span: int = 12,
    height: int = 8,
    stacked: bool = False,
) -> timeseries.Panel:
    panel = timeseries.Panel().fill_opacity(10).legend(
        common.VizLegendOptions()
        .display_mode(common_models.LegendDisplayMode.LIST)
        .placement(common_models.LegendPlacement.BOTTOM)
        .show_legend(True)
    )
    if stacked:
        panel = panel.stacking(common.StackingConfig().mode(common_models.StackingMode.NORMAL))
    result: timeseries.Panel = _finish(panel, title, description, unit, span, height, targets)
    return result


def stat_panel(
    title: str, description: str, unit: str, *targets: prometheus.Dataquery, span: int = 4, height: int = 4
) -> stat.Panel:
    panel = (
        stat.Panel()
        .graph_mode(common_models.BigValueGraphMode.NONE)
        .color_mode(common_models.BigValueColorMode.VALUE)
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))
    )
    result: stat.Panel = _finish(panel, title, description, unit, span, height, targets)
    return result


def table_panel(
    title: str, description: str, unit: str, *targets: prometheus.Dataquery, span: int = 24, height: int = 8
) -> table.Panel:
    result: table.Panel = _finish(table.Panel().show_header(True), title, description, unit, span, height, targets)
    return result


def bargauge_panel(
    title: str, description: str, unit: str, *targets: prometheus.Dataquery, span: int = 12, height: int = 8
) -> bargauge.Panel:
    panel = (
        bargauge.Panel()
        .display_mode(common_models.BarGaugeDisplayMode.GRADIENT)
        .orientation(common_models.VizOrientation.HORIZONTAL)
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))
    )
    result: bargauge.Panel = _finish(panel, title, description, unit, span, height, targets)
    return result


def _normalise(model: dict[str, Any]) -> dict[str, Any]:
    """Fields Grafana expects on import: ``id`` null, panel ids unique, options objects."""
    model["id"] = None
    model.setdefault("annotations", {}).setdefault("list", [])
    next_id = 1
    for panel in model.get("panels", []):
        panel["id"] = next_id
        next_id += 1
        if panel.get("options") is None:
            panel["options"] = {}
    for variable in model.get("templating", {}).get("list", []):
        variable.pop("id", None)
    return model


def to_json(builder: dashboard.Dashboard) -> str:
    """Stable JSON text of a dashboard (sorted keys, two-space indent, final newline)."""
    raw = json.loads(json.dumps(builder.build(), cls=JSONEncoder))
    return json.dumps(_normalise(raw), sort_keys=True, indent=2) + "\n"
