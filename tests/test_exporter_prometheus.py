"""The exporter against the real Prometheus tools: promtool lint and a real server scraping two exporters."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from exporter.server import serve_in_thread
from exporter.settings import ExporterSettings
from gpulens.sim.fleet import SimulatedFleet
from gpulens.sim.scenario_file import load_scenario
from tests.support.exporter import http_get
from tests.support.prometheus import promtool, require_binary, running_prometheus

pytestmark = pytest.mark.prometheus

DAY = 86_400.0


def test_promtool_finds_no_problem_in_the_default_simulated_node() -> None:
    fleet = SimulatedFleet(load_scenario(None))
    t = fleet.scenario.epoch_seconds + 2.5 * DAY
    with serve_in_thread(clock=lambda: t, background_cycle=False) as handle:
        status, _, body = http_get(handle.url + "/metrics")
    assert status == 200 and b"gpulens_device_gpu_equivalents" in body
    rc, output = promtool("check", "metrics", stdin=body.decode())
    assert (rc, output.strip()) == (0, "")


def test_prometheus_tenant_totals_over_two_exporters_equal_the_simulator_truth(tmp_path: Path) -> None:
    fleet = SimulatedFleet(load_scenario(None))
    nodes = fleet.node_names()[:2]
    t = fleet.scenario.epoch_seconds + 3.25 * DAY  # frozen virtual time: exporters serve the state at t
    truth: dict[str, float] = defaultdict(float)
    for node in nodes:
        for allocation in fleet.node_snapshot(node, t).allocations:
            truth[allocation.tenant] += allocation.gpu_equivalents
    assert len(truth) >= 2

    handles = [serve_in_thread(ExporterSettings(listen="127.0.0.1:0", node=node), clock=lambda: t,
                               background_cycle=False) for node in nodes]
    try:
        targets = [h.url.removeprefix("http://") for h in handles]
        with running_prometheus(targets, data_dir=tmp_path / "prom") as prom:
            prom.wait_for_targets_up(2)
            result = prom.query("sum by (tenant) (gpulens_allocation_gpu_equivalents)")
            nodes_seen = prom.query("count by (node) (gpulens_gpu_info)")
    finally:
        for h in handles:
            h.stop()
    got = {r["metric"]["tenant"]: float(r["value"][1]) for r in result}
    assert got.keys() == truth.keys()
    for tenant, value in truth.items():
        assert got[tenant] == pytest.approx(value, abs=1e-9), tenant
    assert {r["metric"]["node"] for r in nodes_seen} == set(nodes)


def test_a_missing_binary_skips_loudly_outside_ci_and_fails_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="SKIPPED LOUDLY: 'gpulens-no-such-tool' binary not found"):
        require_binary("gpulens-no-such-tool")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and 'gpulens-no-such-tool' binary not found"):
        require_binary("gpulens-no-such-tool")
