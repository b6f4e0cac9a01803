"""The Prometheus rules in deploy/prometheus/: valid, unit-tested with the real promtool, shipped as a PrometheusRule."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from analytics.remediation.service_metrics import ServiceMetrics
from analytics.settings import AnalysisSettings
from collector.dcgm_records import DCGM_GROUP, DCGM_RECORDS
from collector.mapping import DCGM_METRICS as DCGM_COLLECTED
from dashboards.grafana.promql import metric_names
from tests.support.prometheus import promtool

ROOT = Path(__file__).resolve().parents[1]
RULES_DIR = ROOT / "deploy" / "prometheus"
RULES_FILE = RULES_DIR / "gpulens-rules.yaml"
RULE_TESTS = sorted((RULES_DIR / "tests").glob("*.yaml"))
PROMETHEUS_RULE = ROOT / "deploy" / "base" / "prometheusrule.yaml"
METRICS_DOC = ROOT / "docs" / "metrics.md"
ALERTS_DOC = ROOT / "docs" / "alerts.md"

# Metrics that come from elsewhere than the gpulens exporter.
KUEUE_METRICS = frozenset(
    {"kueue_pending_workloads", "kueue_cluster_queue_resource_usage", "kueue_cluster_queue_nominal_quota"}
)
PROMETHEUS_METRICS = frozenset({"up"})
REMEDIATION_METRICS = frozenset(
    f"{family.name}{suffix}" for family in ServiceMetrics().registry.collect()
    for suffix in {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}.get(family.type, ("",))
)
"""What the remediation service serves on its own /metrics (its alerts read them)."""
KUBE_STATE_METRICS = frozenset({"kube_node_labels"})
"""kube-state-metrics series the topology rules join (docs/alerts.md, sources outside gpulens)."""
DCGM_METRICS = frozenset(DCGM_COLLECTED)
"""dcgm-exporter series the collector reads: the rollup group records the fast-moving ones."""
RECORD_NAME = re.compile(
    r"^[a-z]+(?:_[a-z]+)*:(?:gpulens_[a-z0-9_]+|dcgm_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+):[a-z0-9_]+$")


def documented_metrics() -> set[str]:
    """Metric names in the table of docs/metrics.md (the exporter contract)."""
    rows = re.findall(r"^\|\s*`(gpulens_[a-z0-9_]+)`\s*\|", METRICS_DOC.read_text(encoding="utf-8"), re.MULTILINE)
    assert rows, "docs/metrics.md has no metric table"
    return set(rows)


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))["groups"]
    return groups


def all_rules() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in all_rules() if "alert" in rule]


def recorded_names() -> set[str]:
    return {rule["record"] for rule in all_rules() if "record" in rule}


def rule_test_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for path in RULE_TESTS:
        cases.extend(yaml.safe_load(path.read_text(encoding="utf-8"))["tests"])
    return cases


@pytest.mark.prometheus
def test_promtool_check_rules_finds_the_rules_file_clean() -> None:
    code, output = promtool("check", "rules", str(RULES_FILE))
    assert code == 0, output
    assert f"SUCCESS: {len(all_rules())} rules found" in output


@pytest.mark.prometheus
def test_every_promtool_unit_test_passes() -> None:
    assert RULE_TESTS, "no promtool unit tests in deploy/prometheus/tests/"
    code, output = promtool("test", "rules", *(str(path) for path in RULE_TESTS), timeout=300)
    assert code == 0, output
    assert "FAILED" not in output


def _unit_tests_of_mutated_rules(tmp_path: Path, old: str, new: str, test_file: str,
                                 alert: str | None = None) -> tuple[int, str]:
    """Run one promtool test file against the rules file with ``old`` replaced by ``new`` (only the file's
    test cases that check ``alert``, when one is named)."""
    text = RULES_FILE.read_text(encoding="utf-8")
    broken = text.replace(old, new)
    assert broken != text
    (tmp_path / "gpulens-rules.yaml").write_text(broken, encoding="utf-8")
    (tmp_path / "tests").mkdir()
    tests = RULES_DIR / "tests" / test_file
    body = tests.read_text(encoding="utf-8")
    if alert is not None:
        suite = yaml.safe_load(body)
        suite["tests"] = [case for case in suite["tests"]
                          if any(check["alertname"] == alert for check in case.get("alert_rule_test", []))]
        assert suite["tests"], f"no test case of {test_file} checks {alert}"
        body = yaml.safe_dump(suite, sort_keys=False)
    (tmp_path / "tests" / tests.name).write_text(body, encoding="utf-8")
    return promtool("test", "rules", str(tmp_path / "tests" / tests.name), timeout=300)


@pytest.mark.prometheus
def test_the_unit_tests_catch_a_rule_that_stops_matching_a_drain_class_xid(tmp_path: Path) -> None:
    """Mutation check: dropping XID 79 from the drain list must make the alert tests fail."""
    code, output = _unit_tests_of_mutated_rules(tmp_path, "74|79|95", "74|95", "alerts_test.yaml",
                                                alert="GpuDrainClassXid")
    assert code != 0
    assert "GpuDrainClassXid" in output


def test_every_alert_has_a_unit_test_where_it_fires_and_one_where_it_stays_silent() -> None:
    fires: set[str] = set()
    silent: set[str] = set()
    for case in rule_test_cases():
        for check in case.get("alert_rule_test", []):
            (fires if check.get("exp_alerts") else silent).add(check["alertname"])
    names = {alert["alert"] for alert in alerts()}
    assert names - fires == set(), "alerts without a firing case"
    assert names - silent == set(), "alerts without a silent case"


def test_every_recording_rule_is_checked_by_a_unit_test() -> None:
    tested: set[str] = set()
    for case in rule_test_cases():
        for check in case.get("promql_expr_test", []):
            tested |= metric_names(check["expr"])
    assert recorded_names() - tested == set()


def test_every_alert_has_a_severity_a_summary_a_description_and_a_runbook_section() -> None:
    runbook = ALERTS_DOC.read_text(encoding="utf-8")
    for alert in alerts():
        name = alert["alert"]
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}, name
        assert alert["annotations"]["summary"].strip(), name
        assert alert["annotations"]["description"].strip(), name
        assert alert["annotations"]["runbook_url"].endswith(f"docs/alerts.md#{name.lower()}"), name
        assert re.search(rf"^## {name}$", runbook, re.MULTILINE), f"docs/alerts.md has no section for {name}"


def test_alert_texts_print_values_rounded_never_raw_floats() -> None:
    """A raw ``{{ $value }}`` prints "1.0091999999999999 new uncorrectable ECC errors": every value goes
    through ``printf`` or a ``humanize`` function."""
    raw = re.compile(r"\{\{\s*\$value\s*\}\}")
    for alert in alerts():
        for key, text in alert["annotations"].items():
            assert not raw.search(text), f"{alert['alert']}.{key} prints $value unformatted"
            for use in re.findall(r"\{\{[^}]*\$value[^}]*\}\}", text):
                assert "humanize" in use or "printf" in use, (alert["alert"], use)


def test_every_recording_rule_is_documented_in_the_alerts_guide() -> None:
    guide = ALERTS_DOC.read_text(encoding="utf-8")
    undocumented = [
        name for name in sorted(recorded_names())
        if f"`{name}`" not in guide and not (name.startswith("cluster:") and "`cluster:*`" in guide)
    ]
    assert undocumented == []


def test_recording_rules_are_named_level_metric_operations() -> None:
    bad = [name for name in recorded_names() if not RECORD_NAME.match(name)]
    assert bad == []


def test_rules_read_only_documented_metrics_their_own_records_kueue_dcgm_and_up() -> None:
    allowed = (documented_metrics() | recorded_names() | KUEUE_METRICS | PROMETHEUS_METRICS | KUBE_STATE_METRICS
               | DCGM_METRICS | REMEDIATION_METRICS)
    unknown = {
        (rule.get("record") or rule["alert"], name)
        for rule in all_rules()
        for name in metric_names(rule["expr"])
        if name not in allowed
    }
    assert unknown == set()


def test_the_prometheusrule_carries_exactly_the_groups_of_the_rules_file() -> None:
    shipped = yaml.safe_load(PROMETHEUS_RULE.read_text(encoding="utf-8"))
    assert shipped["kind"] == "PrometheusRule"
    assert shipped["spec"]["groups"] == rule_groups()
    result = subprocess.run(
        [sys.executable, str(RULES_DIR / "render_prometheusrule.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_drain_class_xids_are_the_reset_or_drain_codes_and_never_application_codes() -> None:
    """The XID list follows NVIDIA's catalog (reset/drain/replace); application XIDs are left out."""
    expr = next(alert["expr"] for alert in alerts() if alert["alert"] == "GpuDrainClassXid")
    match = re.search(r'xid=~"([0-9|]+)"', expr)
    assert match is not None
    codes = set(match.group(1).split("|"))
    assert {"48", "62", "64", "74", "79", "95", "119", "120", "140"} <= codes
    assert codes.isdisjoint({"13", "31", "43", "45", "68"})


def test_the_dcgm_group_records_exactly_the_collectors_fields_each_coalescing_both_generations() -> None:
    (group,) = [g for g in rule_groups() if g["name"] == DCGM_GROUP]
    rules = [(rule["record"], rule["expr"].strip()) for rule in group["rules"]]
    assert rules == [(r.record, r.expr) for r in DCGM_RECORDS]
    gpu_util = next(expr for record, expr in rules if record == "device:dcgm_gpu_util:ratio")
    assert "DCGM_FI_DEV_GPU_UTIL_RATIO or DCGM_FI_DEV_GPU_UTIL / 100" in gpu_util


def test_dcgm_alerts_read_only_the_generation_independent_records() -> None:
    (group,) = [g for g in rule_groups() if g["name"] == "gpulens.dcgm.alerts"]
    dcgm_records = {r.record for r in DCGM_RECORDS}
    for alert in group["rules"]:
        names = metric_names(alert["expr"])
        assert names and names <= dcgm_records, (alert["alert"], names)


@pytest.mark.prometheus
def test_the_dcgm_unit_tests_catch_a_record_that_forgets_the_unit_of_the_pre_4_9_name(tmp_path: Path) -> None:
    """Mutation check: reading GPU_UTIL (%) as a ratio must make the both-generations tests fail."""
    code, output = _unit_tests_of_mutated_rules(
        tmp_path, "DCGM_FI_DEV_GPU_UTIL_RATIO or DCGM_FI_DEV_GPU_UTIL / 100",
        "DCGM_FI_DEV_GPU_UTIL_RATIO or DCGM_FI_DEV_GPU_UTIL", "dcgm_rules_test.yaml")
    assert code != 0
    assert "device:dcgm_gpu_util:ratio" in output


def test_the_idle_record_decides_idle_with_the_activity_threshold_analyze_uses_by_default() -> None:
    """One idle: the record counts held GE where the device's reading is below analyze's default threshold."""
    rule = next(r for r in all_rules() if r.get("record") == "tenant:gpulens_idle_gpu_equivalents:sum")
    thresholds = re.findall(r"gpulens_device_activity_ratio\s*(?:<|>=)\s*([0-9.]+)", rule["expr"])
    assert len(thresholds) == 2, rule["expr"]
    assert {float(t) for t in thresholds} == {AnalysisSettings.model_fields["activity_threshold"].default}
    assert "gpulens_tenant_active_gpu_equivalents" not in rule["expr"], "idle is not allocated x (1 - activity)"


def test_the_unused_share_of_held_ge_has_its_own_record_name_documented_apart_from_idle() -> None:
    unused = next(r for r in all_rules() if r.get("record") == "tenant:gpulens_unused_gpu_equivalents:sum")
    assert "gpulens_tenant_active_gpu_equivalents" in unused["expr"]
    metrics_doc = METRICS_DOC.read_text(encoding="utf-8")
    assert "tenant:gpulens_unused_gpu_equivalents:sum" in metrics_doc
    assert "tenant:gpulens_idle_gpu_equivalents:sum" in metrics_doc
