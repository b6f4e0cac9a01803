"""Kueue's local-queue metrics through a REAL Prometheus (TSDB blocks built with promtool) into the store's
quota model: LocalQueue rows of ``quota_snapshots`` with usage per flavor and resource and the queue's
pending workloads, as the Kubernetes inventory writes LocalQueues."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from collector.prometheus import HttpSettings, PrometheusClient, collect_range
from collector.store import Store
from tests.support.prometheus import serving_openmetrics

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

STEP = 60.0
START = (time.time() // 3600) * 3600 - 2 * 3600
MINUTES = 3


def openmetrics() -> str:
    lines = ["# TYPE kueue_local_queue_resource_usage gauge", "# TYPE kueue_local_queue_pending_workloads gauge"]
    for i in range(MINUTES):
        t = START + i * STEP
        lq = 'name="lq-train",namespace="research"'
        lines += [
            f'kueue_local_queue_resource_usage{{{lq},flavor="h200",resource="nvidia.com/gpu"}} {4 + i} {t:.0f}',
            f'kueue_local_queue_pending_workloads{{{lq},status="active"}} {i} {t:.0f}',
            f'kueue_local_queue_pending_workloads{{{lq},status="inadmissible"}} 1 {t:.0f}',
            f'kueue_local_queue_pending_workloads{{name="lq-idle",namespace="web",status="active"}} 2 {t:.0f}',
        ]
    return "\n".join(lines) + "\n# EOF\n"


def test_local_queue_usage_and_pending_workloads_land_in_the_quota_model(
        tmp_path: Path, promtool_binary: str, prometheus_binary: str) -> None:
    with serving_openmetrics(openmetrics(), tmp_path) as prom, PrometheusClient(HttpSettings(prom.url)) as client, \
            Store(str(tmp_path / "s.duckdb")) as store:
        collect_range(store, client, start=START, end=START + MINUTES * STEP, step=STEP, schema="gpulens")
        rows = store.query("SELECT epoch(ts) - ?, object_namespace, object_name, tenant, flavor, resource, usage, "
                           "nominal_quota, annotations FROM quota_snapshots WHERE object_kind = 'LocalQueue' "
                           "ORDER BY object_name, ts", [START])
    got = [(int(dt), ns, name, tenant, flavor, res, usage, nominal, json.loads(notes))
           for dt, ns, name, tenant, flavor, res, usage, nominal, notes in rows]
    assert got == [
        *[(60 * i, "web", "lq-idle", "web", "", "", None, None, {"pendingWorkloads": 2}) for i in range(MINUTES)],
        *[(60 * i, "research", "lq-train", "research", "h200", "nvidia.com/gpu", 4.0 + i, None,
           {"pendingWorkloads": i + 1}) for i in range(MINUTES)],
    ]
