"""KAI Scheduler, Volcano and Kueue cohort queue metrics through a REAL Prometheus (TSDB blocks built with
promtool) and ``collect_range`` into the store's quota model: the collector asks for them with every schema."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from collector.prometheus import HttpSettings, PrometheusClient, collect_range
from collector.queue_systems import KAI_QUEUE, VOLCANO_QUEUE, pending_queue
from collector.store import Store
from tests.support.prometheus import serving_openmetrics

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

STEP = 60.0
START = (time.time() // 3600) * 3600 - 2 * 3600
MINUTES = 2


def openmetrics() -> str:
    series = {
        "kai_queue_deserved_gpus": [('queue_name="team-a",job="queue-controller"', lambda i: 4)],
        "kai_queue_allocated_gpus": [('queue_name="team-a",job="queue-controller"', lambda i: 1 + i)],
        "kai_queue_fair_share_gpu": [('queue_name="team-a",job="scheduler"', lambda i: 6)],
        "volcano_queue_deserved_scalar_resources": [('queue_name="org1",resource="nvidia.com/gpu"', lambda i: 8000)],
        "volcano_queue_allocated_scalar_resources": [('queue_name="org1",resource="nvidia.com/gpu"', lambda i: 8000)],
        "volcano_queue_request_scalar_resources": [('queue_name="org1",resource="nvidia.com/gpu"', lambda i: 10000)],
        "kueue_cohort_subtree_quota": [('cohort="ai-factory",flavor="h200",resource="nvidia.com/gpu"', lambda i: 64)],
        "kueue_cohort_subtree_resource_reservations": [
            ('cohort="ai-factory",flavor="h200",resource="nvidia.com/gpu"', lambda i: 40 + i)],
        "kueue_cohort_weighted_share": [('cohort="ai-factory"', lambda i: 300)],
    }
    lines = [f"# TYPE {name} gauge" for name in series]
    for i in range(MINUTES):
        t = START + i * STEP
        lines += [f"{name}{{{labels}}} {value(i)} {t:.0f}" for name, rows in series.items() for labels, value in rows]
    return "\n".join(lines) + "\n# EOF\n"


def test_kai_volcano_and_cohort_queues_are_collected_into_the_quota_model(
        tmp_path: Path, promtool_binary: str, prometheus_binary: str) -> None:
    with serving_openmetrics(openmetrics(), tmp_path) as prom, PrometheusClient(HttpSettings(prom.url)) as client, \
            Store(str(tmp_path / "s.duckdb")) as store:
        collect_range(store, client, start=START, end=START + MINUTES * STEP, step=STEP, schema="gpulens")
        rows = store.query("SELECT epoch(ts) - ?, object_kind, object_name, flavor, resource, nominal_quota, "
                           "borrowing_limit, usage, annotations FROM quota_snapshots ORDER BY object_kind, ts", [START])
        pending = store.query("SELECT epoch(ts) - ?, cluster_queue, resource, quantity FROM pending_demand "
                              "ORDER BY ts", [START])
    got = [(int(dt), kind, name, flavor, res, nominal, ceiling, usage, json.loads(notes) if notes else {})
           for dt, kind, name, flavor, res, nominal, ceiling, usage, notes in rows]
    assert got == [
        *[(60 * i, "Cohort", "ai-factory", "h200", "nvidia.com/gpu", 64.0, None, 40.0 + i, {"weightedShare": 300.0})
          for i in range(MINUTES)],
        *[(60 * i, KAI_QUEUE, "team-a", "", "nvidia.com/gpu", 4.0, None, 1.0 + i, {"fairShareGpus": 6.0})
          for i in range(MINUTES)],
        *[(60 * i, VOLCANO_QUEUE, "org1", "", "nvidia.com/gpu", 8.0, None, 8.0, {}) for i in range(MINUTES)],
    ]
    assert [(int(dt), q, r, qty) for dt, q, r, qty in pending] == [
        (60 * i, pending_queue(VOLCANO_QUEUE, "org1"), "nvidia.com/gpu", 2.0) for i in range(MINUTES)]
