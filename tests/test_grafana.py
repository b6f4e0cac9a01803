"""The Grafana dashboards: generated from Python, committed, valid PromQL over documented metrics only."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from collector.dcgm_records import DCGM_RECORDS
from dashboards.grafana.generate import (
    CONFIGMAP_FILE,
    DASHBOARDS,
    JSON_DIR,
    configmaps_yaml,
    render_all,
)
from dashboards.grafana.price_rules import PRICE_SERIES
from dashboards.grafana.promql import metric_names, substitute_grafana_variables
from tests.support.prometheus import promtool
from tests.test_rules import KUEUE_METRICS, documented_metrics, recorded_names

ROOT = Path(__file__).resolve().parents[1]
LABEL_VALUES = re.compile(r"^label_values\((.+),\s*\w+\)$")


def committed() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text(encoding="utf-8")) for path in sorted(JSON_DIR.glob("*.json"))}


def panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    return [panel for panel in model["panels"] if panel["type"] != "row"]


def expressions(model: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard: panel targets and label_values() variable selectors."""
    exprs = [target["expr"] for panel in panels(model) for target in panel.get("targets", [])]
    for variable in model["templating"]["list"]:
        if variable["type"] == "query":
            match = LABEL_VALUES.match(variable["query"])
            assert match, f"variable {variable['name']} is not label_values(...): {variable['query']}"
            exprs.append(match.group(1))
    return exprs


def all_expressions() -> list[tuple[str, str]]:
    return [(name, expr) for name, model in committed().items() for expr in expressions(model)]


def variables(model: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {variable["name"]: variable for variable in model["templating"]["list"]}


def check_rules_file(path: Path, exprs: list[str]) -> None:
    groups = [{
        "name": "dashboard-queries",
        "rules": [{"record": f"gpulens_dashboard_query_{index}", "expr": expr} for index, expr in enumerate(exprs)],
    }]
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False), encoding="utf-8")


def test_regenerating_gives_exactly_the_committed_json() -> None:
    rendered = render_all()
    on_disk = {path.name: path.read_text(encoding="utf-8") for path in JSON_DIR.glob("*.json")}
    assert on_disk == rendered
    assert CONFIGMAP_FILE is not None
    assert CONFIGMAP_FILE.read_text(encoding="utf-8") == configmaps_yaml(rendered)


def test_python_m_generate_writes_the_five_dashboards(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "dashboards.grafana.generate", "--out", str(tmp_path), "--no-configmaps"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    written = {path.name: path.read_text(encoding="utf-8") for path in tmp_path.glob("*.json")}
    assert written == render_all()
    assert set(written) == {
        "gpulens-fleet.json", "gpulens-tenant.json", "gpulens-node.json", "gpulens-chargeback.json",
        "gpulens-dcgm.json",
    }


def test_check_mode_reports_a_stale_dashboard(tmp_path: Path) -> None:
    (tmp_path / "gpulens-fleet.json").write_text("{}", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "dashboards.grafana.generate", "--out", str(tmp_path), "--no-configmaps", "--check"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 1
    assert "stale" in result.stderr


def test_dashboards_have_stable_unique_uids_null_ids_and_the_gpulens_tag() -> None:
    models = committed()
    uids = [model["uid"] for model in models.values()]
    assert sorted(uids) == sorted(DASHBOARDS)
    for name, model in models.items():
        assert name == f"{model['uid']}.json"
        assert 8 <= len(model["uid"]) <= 40
        assert model["id"] is None
        assert "gpulens" in model["tags"]
        ids = [panel["id"] for panel in model["panels"]]
        assert len(ids) == len(set(ids))


def test_every_panel_queries_the_datasource_variable() -> None:
    for name, model in committed().items():
        datasource = variables(model)["datasource"]
        assert datasource["type"] == "datasource" and datasource["query"] == "prometheus", name
        for panel in panels(model):
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (name, panel["title"])
            assert panel["targets"], (name, panel["title"])


@pytest.mark.parametrize(
    ("file_name", "variable", "minimum_uses"),
    [
        ("gpulens-tenant.json", "tenant", 15),
        ("gpulens-tenant.json", "node", 2),
        ("gpulens-chargeback.json", "tenant", 10),
        ("gpulens-node.json", "node", 20),
        ("gpulens-node.json", "gpu", 15),
        ("gpulens-dcgm.json", "node", 15),
        ("gpulens-dcgm.json", "gpu", 15),
    ],
)
def test_dashboards_filter_by_their_tenant_and_node_variables(file_name: str, variable: str, minimum_uses: int) -> None:
    model = committed()[file_name]
    defined = variables(model)[variable]
    assert defined["multi"] and defined["includeAll"] and defined["allValue"] == ".*"
    used = [expr for expr in expressions(model) if f"${variable}" in expr]
    assert len(used) >= minimum_uses, f"${variable} is used by {len(used)} queries"


def test_tenant_controlled_values_are_only_used_in_regex_matchers() -> None:
    """Multi-value variables are regex-escaped by Grafana; a plain `="$tenant"` would not be."""
    for name, expr in all_expressions():
        for variable in ("tenant", "node", "gpu"):
            uses = expr.count(f"${variable}")
            safe = len(re.findall(rf'=~"\${variable}"', expr))
            assert uses == safe, (name, expr)


def test_chargeback_prices_each_model_with_the_price_book_series_not_a_typed_in_box() -> None:
    """It priced every GPU with one `$price_per_gpu_hour` box (default 2.50) and showed money without a unit."""
    model = committed()["gpulens-chargeback.json"]
    assert "price_per_gpu_hour" not in variables(model)
    exprs = expressions(model)
    assert not any("$price_per_gpu_hour" in e for e in exprs)
    costs = [e for e in exprs if PRICE_SERIES in e]
    assert any("tenant_model_profile:gpulens_allocation_gpu_equivalents:sum" in e and "$__range_s / 3600" in e
               and "on (model) group_left" in e for e in costs)
    assert any("tenant:gpulens_idle_gpu_equivalents:sum" in e for e in costs)
    for panel in panels(model):
        targets = [t["expr"] for t in panel.get("targets", [])]
        if any(PRICE_SERIES in t for t in targets):
            assert panel["fieldConfig"]["defaults"]["unit"] == "currencyUSD", panel["title"]


@pytest.mark.prometheus
def test_every_dashboard_query_is_valid_promql_for_promtool(tmp_path: Path) -> None:
    exprs = [substitute_grafana_variables(expr) for _, expr in all_expressions()]
    assert len(exprs) > 40
    rules = tmp_path / "dashboard-queries.yaml"
    check_rules_file(rules, exprs)
    code, output = promtool("check", "rules", str(rules))
    assert code == 0, output
    assert f"SUCCESS: {len(exprs)} rules found" in output


@pytest.mark.prometheus
def test_promtool_rejects_a_broken_dashboard_query(tmp_path: Path) -> None:
    """The check above can fail: an unbalanced expression is reported."""
    rules = tmp_path / "broken.yaml"
    check_rules_file(rules, ['sum by (tenant (tenant:gpulens_allocation_gpu_equivalents:sum{tenant=~".*"})'])
    code, output = promtool("check", "rules", str(rules))
    assert code != 0
    assert "gpulens_dashboard_query_0" in output or "parse error" in output


def test_every_dashboard_query_reads_only_documented_metrics_recording_rules_or_kueue() -> None:
    allowed = documented_metrics() | recorded_names() | KUEUE_METRICS | {PRICE_SERIES}  # `gpulens prices rules`
    unknown = {
        (name, metric)
        for name, expr in all_expressions()
        for metric in metric_names(substitute_grafana_variables(expr))
        if metric not in allowed
    }
    assert unknown == set()


def test_the_dashboards_together_show_every_documented_metric() -> None:
    shown = {metric for _, expr in all_expressions() for metric in metric_names(substitute_grafana_variables(expr))}
    assert documented_metrics() - shown == set()


def test_an_unknown_grafana_variable_is_an_error_not_a_silent_pass() -> None:
    with pytest.raises(KeyError, match=r"\$cluster"):
        substitute_grafana_variables('up{cluster=~"$cluster"}')


def test_metric_names_sees_selected_metrics_but_not_functions_labels_keywords_or_strings() -> None:
    expr = (
        'sum by (tenant) (rate(gpulens_gpu_energy_joules_total{node=~"a|b{1}"}[5m])) '
        '/ on (node) group_left (model) gpulens_gpu_info and tenant:x:sum offset 5m unless '
        'label_replace(kueue_pending_workloads, "t", "$1", "cluster_queue", "(.+)") > bool 1e3'
    )
    assert metric_names(expr) == {
        "gpulens_gpu_energy_joules_total", "gpulens_gpu_info", "tenant:x:sum", "kueue_pending_workloads"
    }


def test_the_fleet_dashboard_lists_the_jobs_the_block_spread_alert_is_about() -> None:
    from tests.test_rules import alerts

    alert = next(a for a in alerts() if a["alert"] == "GpuJobSpansMoreBlocksThanNeeded")
    fleet = committed()["gpulens-fleet.json"]
    panel = next(p for p in panels(fleet) if p["title"] == "Jobs spanning more blocks than needed")
    assert [t["expr"] for t in panel["targets"]] == [alert["expr"].strip()]


def test_the_dcgm_exporter_dashboard_needs_no_gpulens_exporter_and_no_generation_s_names() -> None:
    """It reads only the records of gpulens.dcgm.rules, which coalesce both dcgm-exporter generations:
    no gpulens_* series (no gpulens exporter needed) and no DCGM_FI_* name of one generation."""
    model = committed()["gpulens-dcgm.json"]
    read = {metric for expr in expressions(model) for metric in metric_names(substitute_grafana_variables(expr))}
    records = {r.record for r in DCGM_RECORDS}
    assert read and read <= records, read - records
    assert {"device:dcgm_gr_engine:ratio", "device:dcgm_gpu_util:ratio", "gpu:dcgm_power:watts"} <= read


def test_idle_panels_read_the_per_sample_idle_record_and_the_unused_share_has_its_own_panel() -> None:
    """Idle in Grafana is analyze's idle; held GE x (1 - activity) is shown only under its own title."""
    panels = {p["title"]: p for model in committed().values() for p in model.get("panels", []) if "title" in p}
    idle = [p for title, p in panels.items() if "idle" in title.lower()]
    assert idle
    for panel in idle:
        exprs = " ".join(t.get("expr", "") for t in panel.get("targets", []))
        assert "gpulens_unused_gpu_equivalents" not in exprs, panel["title"]
    unused = [title for title, p in panels.items()
              if any("tenant:gpulens_unused_gpu_equivalents:sum" in t.get("expr", "") for t in p.get("targets", []))]
    assert unused == ["Unused share of held GE"]
