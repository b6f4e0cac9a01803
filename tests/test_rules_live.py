"""Rules and dashboard queries against a real Prometheus scraping real simulated exporters.

promtool checks syntax and the unit tests check arithmetic on hand-written series; this checks that
the rules fit what the exporter really emits (label names, joins that must stay one-to-one) and that
every dashboard query runs without a runtime error (for example a many-to-many match).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards.grafana.generate import JSON_DIR
from dashboards.grafana.promql import substitute_grafana_variables
from tests.support.exporter import start_exporter_process, stop_process, wait_healthy
from tests.support.prometheus import PrometheusServer, require_binary, running_prometheus
from tests.test_grafana import expressions
from tests.test_rules import RULES_FILE

ROOT = Path(__file__).resolve().parents[1]
NODES = ("gpu-h200-mig-0", "gpu-a100-mig-0", "gpu-h100-ts-0")
JOB = "gpulens-exporter"

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]


def _every_second(rules_file: Path, out: Path) -> Path:
    """The shipped rules with each group's 1m interval removed, so they evaluate at the test's 1s."""
    rules = yaml.safe_load(rules_file.read_text(encoding="utf-8"))
    for group in rules["groups"]:
        group.pop("interval", None)
    out.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    return out


def _wait_for(server: PrometheusServer, promql: str, timeout: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        result = server.query(promql)
        if result:
            return result
        assert time.monotonic() < deadline, f"no result for {promql} after {timeout}s"
        time.sleep(0.5)


def _by(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {sample["metric"].get(label, ""): float(sample["value"][1]) for sample in result}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("live")
    procs: list[subprocess.Popen[str]] = []
    targets: list[str] = []
    try:
        for node in NODES:
            proc, url = start_exporter_process("--backend", "sim", "--node", node, "--interval", "1s",
                                               stdout=subprocess.DEVNULL)
            procs.append(proc)
            targets.append(url.removeprefix("http://"))
        for proc, target in zip(procs, targets, strict=True):
            wait_healthy(proc, f"http://{target}")
        rules = _every_second(RULES_FILE, tmp / "rules.yaml")
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{
                "job_name": JOB, "scrape_interval": "1s", "scrape_timeout": "1s", "honor_labels": True,
                "static_configs": [{"targets": targets}],
            }],
        }
        with running_prometheus(data_dir=tmp / "prometheus", config=config, rule_files=[rules]) as server:
            server.wait_for_targets_up(len(NODES))
            _wait_for(server, "cluster:gpulens_gpu_up:sum")
            # rule groups evaluate at their own offsets: wait until one has seen every exporter's GPUs
            _wait_for(server, f"count(node:gpulens_gpus:count) == {len(NODES)}")
            _wait_for(server, "tenant:gpulens_idle_gpu_equivalents:sum")
            yield server
    finally:
        for proc in procs:
            stop_process(proc)


def _agree_eventually(server: PrometheusServer, left: str, right: str, label: str, attempts: int = 30) -> dict[str, float]:
    """Two queries give the same values per ``label`` at some moment.

    Rule groups evaluate at their own offsets while the simulated workloads move, so one pair of
    queries may straddle a change; a systematic difference (a join that drops series) never agrees.
    """
    last: tuple[dict[str, float], dict[str, float]] = ({}, {})
    for _ in range(attempts):
        a, b = _by(server.query(left), label), _by(server.query(right), label)
        if a and a.keys() == b.keys() and all(abs(a[key] - b[key]) < 1e-9 for key in a):
            return a
        last = (a, b)
        time.sleep(0.5)
    raise AssertionError(f"{left} and {right} never agreed: {last}")


def test_tenant_rules_agree_with_the_exporters_own_per_tenant_series(prometheus: PrometheusServer) -> None:
    recorded = _agree_eventually(
        prometheus, "tenant:gpulens_allocation_gpu_equivalents:sum",
        "sum by (tenant) (gpulens_tenant_allocated_gpu_equivalents)", "tenant",
    )
    assert len(recorded) >= 2


def test_the_model_join_loses_no_allocation(prometheus: PrometheusServer) -> None:
    totals = _agree_eventually(
        prometheus, "sum(model:gpulens_allocation_gpu_equivalents:sum)",
        "sum(cluster:gpulens_allocation_gpu_equivalents:sum)", "__none__",
    )
    assert totals[""] > 0


def test_node_rules_count_every_gpu_of_every_exporter(prometheus: PrometheusServer) -> None:
    gpus = _by(prometheus.query("node:gpulens_gpus:count"), "node")
    assert set(gpus) == set(NODES)
    assert gpus == _by(prometheus.query("count by (node) (gpulens_gpu_info)"), "node")


def test_every_recording_rule_records_something_for_the_simulated_fleet(prometheus: PrometheusServer) -> None:
    rules = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))
    records = [rule["record"] for group in rules["groups"] for rule in group["rules"] if "record" in rule]
    # Free devices depend on the moment's workloads in the simulator; everything else always exists.
    may_be_empty = {"model_profile:gpulens_unallocated_devices:count"}
    # The topology rules join kube-state-metrics' kube_node_labels, which this Prometheus does not scrape:
    # their promtool unit tests (deploy/prometheus/tests) check them.
    needs_kube_state_metrics = {rule["record"] for group in rules["groups"] if group["name"] == "gpulens.topology.rules"
                                for rule in group["rules"]}
    # The rollups of dcgm-exporter's names and the records of gpulens.dcgm.rules read series this Prometheus
    # does not scrape: their promtool unit tests (deploy/prometheus/tests/rollup_rules_test.yaml,
    # dcgm_rules_test.yaml) and tests/test_collector_prometheus_rollups_real.py check them.
    needs_dcgm_exporter = {record for record in records if "DCGM_" in record or ":dcgm_" in record}
    expected = [record for record in records if record not in may_be_empty | needs_kube_state_metrics
                | needs_dcgm_exporter]
    deadline = time.monotonic() + 30.0  # every group evaluates each second here; the first rounds may lag
    while (empty := [record for record in expected if not prometheus.query(record)]) and time.monotonic() < deadline:
        time.sleep(1.0)
    assert empty == []
    assert any(record.startswith("device:gpulens_") for record in expected), "the rollups are checked here too"


def test_no_health_or_exporter_alert_fires_for_a_healthy_fleet(prometheus: PrometheusServer) -> None:
    alerts = prometheus.api("alerts")["alerts"]
    noisy = {alert["labels"]["alertname"] for alert in alerts} & {
        "GpulensExporterDown", "GpulensExporterAbsent", "GpulensExporterStale", "GpuRowRemapFailed",
    }
    assert noisy == set()


def test_every_dashboard_query_runs_on_prometheus_without_error(prometheus: PrometheusServer) -> None:
    failures: list[str] = []
    count = 0
    for path in sorted(JSON_DIR.glob("*.json")):
        for expr in expressions(json.loads(path.read_text(encoding="utf-8"))):
            count += 1
            try:
                prometheus.query(substitute_grafana_variables(expr))
            except AssertionError as error:
                failures.append(f"{path.name}: {expr}: {error}")
    assert count > 40
    assert failures == []
