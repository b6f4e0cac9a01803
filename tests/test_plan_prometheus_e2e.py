"""End to end on a Kueue-only fleet: a REAL Prometheus serving Kueue's metrics (promtool-built blocks) ->
collector -> store -> `gpulens plan --capacity` -> ClusterQueue YAML, checked against the plan's constraints."""

from __future__ import annotations

import math
import time
from pathlib import Path

import duckdb
import pytest
import yaml

from collector.prometheus import HttpSettings, PrometheusClient, collect_range
from collector.store import Store
from tests.support.cli import gpulens
from tests.support.prometheus import promtool, require_binary, running_prometheus

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

STEP = 300
DAYS = 15
END = (time.time() // 3600) * 3600 - 3600
START = END - DAYS * 86400
N = int((END - START) // STEP)
CQ = 'cohort="ai-factory",flavor="default-flavor",resource="nvidia.com/gpu"'


def _usage(queue: str, i: int) -> float | None:
    """Bursty, real-looking traces: work-hours waves, short spikes, and a day with no samples for vc-old."""
    hour = (i * STEP // 3600) % 24
    spike = 1 if (i * 7919) % 13 == 0 else 0
    if queue == "vc-busy":
        return float(min(24, 18 + (4 if 8 <= hour < 20 else 0) + 2 * spike))
    if queue == "vc-idle":
        return float(3 + (3 if spike else 0) + (1 if 9 <= hour < 17 else 0))
    if queue == "vc-grow":
        return 8.0
    if 5 * 288 <= i < 6 * 288:  # vc-old: scrape gap of a day
        return None
    return float(4 + spike)


def _pending(queue: str, i: int) -> float:
    hour = (i * STEP // 3600) % 24
    if queue == "vc-busy":
        return 6.0 if 8 <= hour < 20 else 0.0
    if queue == "vc-grow":
        return 4.0 + 6.0 * ((i // 12) % 2)
    return 0.0


QUEUES = {"vc-busy": 24, "vc-idle": 24, "vc-grow": 8, "vc-old": 8}


def _openmetrics() -> str:
    families: dict[str, list[str]] = {}
    for q, nominal in QUEUES.items():
        labels = f'{CQ},cluster_queue="{q}"'
        for i in range(N):
            t = START + i * STEP
            families.setdefault("kueue_cluster_queue_nominal_quota", []).append(f"{{{labels}}} {nominal} {t:.0f}")
            families.setdefault("kueue_cluster_queue_borrowing_limit", []).append(f"{{{labels}}} +Inf {t:.0f}")
            if q != "vc-old":  # an older Kueue without lendingLimit
                families.setdefault("kueue_cluster_queue_lending_limit", []).append(f"{{{labels}}} 4 {t:.0f}")
            used = _usage(q, i)
            if used is not None:
                families.setdefault("kueue_cluster_queue_resource_usage", []).append(f"{{{labels}}} {used:g} {t:.0f}")
            pend = _pending(q, i)
            families.setdefault("kueue_cluster_queue_resource_pending", []).append(
                f'{{cluster_queue="{q}",resource="nvidia.com/gpu"}} {pend:g} {t:.0f}')
            families.setdefault("kueue_pending_workloads", []).append(
                f'{{cluster_queue="{q}",status="active"}} {math.ceil(pend / 2):g} {t:.0f}')
    out = []
    for name, samples in families.items():
        out.append(f"# TYPE {name} gauge")
        out += [name + s for s in samples]
    return "\n".join(out) + "\n# EOF\n"


@pytest.fixture(scope="module")
def kueue_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_binary("promtool")
    require_binary("prometheus")
    tmp = tmp_path_factory.mktemp("plan-e2e")
    source = tmp / "kueue.om"
    source.write_text(_openmetrics(), encoding="utf-8")
    code, output = promtool("tsdb", "create-blocks-from", "openmetrics", str(source), str(tmp / "tsdb"), timeout=300)
    assert code == 0, output
    db = tmp / "kueue.duckdb"
    args = ["--query.lookback-delta=10m", "--storage.tsdb.retention.time=100y"]
    with running_prometheus(data_dir=tmp / "prom", storage_path=tmp / "tsdb", extra_args=args) as prom, \
            Store(str(db)) as store, PrometheusClient(HttpSettings(prom.url)) as client:
        collect_range(store, client, start=START, end=END, step=STEP, schema="gpulens", max_points=1440)
        assert store.count("devices") == 0  # Kueue metrics only: no inventory
    return db


def test_a_kueue_only_fleet_gets_a_plan_under_the_capacity_file(kueue_store: Path, tmp_path: Path) -> None:
    capacity = tmp_path / "capacity.yaml"
    capacity.write_text("flavors:\n  default-flavor:\n    nvidia.com/gpu: 80\n"
                        "largest_node:\n  default-flavor:\n    nvidia.com/gpu: 8\n")
    out = tmp_path / "plan"
    proc = gpulens("plan", "--db", str(kueue_store), "--capacity", str(capacity), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "default-flavor nvidia.com/gpu: 80 units (capacity file)" in proc.stdout
    assert "reserve 8 [n+1 (largest node: 8)] = 72 for nominal quotas" in proc.stdout
    with duckdb.connect(str(kueue_store), read_only=True) as con:
        rows = {r[0]: r[1:] for r in con.execute(
            "SELECT cluster_queue, current_quota, planned_quota, target_quota, binding_constraint, capacity "
            "FROM quota_plan ORDER BY 1").fetchall()}
    assert set(rows) == set(QUEUES)
    assert sum(r[1] for r in rows.values()) <= 72 and sum(r[2] for r in rows.values()) <= 72
    assert rows["vc-busy"][1] >= 24  # pending work: never cut
    assert rows["vc-grow"][1] > 8 and rows["vc-grow"][3] == "step"  # waiting work: raised one step (25% of 8)
    assert rows["vc-idle"][1] == 18 and rows["vc-idle"][3] == "step"  # idle, 15 days of evidence: cut one step
    written = {p.name: yaml.safe_load(p.read_text().split("\n", 4)[-1]) for p in out.glob("*.yaml")}
    for name, (_, planned, *_rest) in rows.items():
        file = f"clusterqueue-{name}.yaml"
        if planned == QUEUES[name]:
            assert file not in written
            continue
        body = written[file]
        assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2" and body["metadata"]["name"] == name
        resources = body["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
        assert resources[0]["name"] == "nvidia.com/gpu" and resources[0]["nominalQuota"] == planned


def test_the_same_store_and_policy_give_a_byte_identical_plan(kueue_store: Path, tmp_path: Path) -> None:
    capacity = tmp_path / "capacity.yaml"
    capacity.write_text("flavors: {default-flavor: {nvidia.com/gpu: 40}}\n")
    a = gpulens("plan", "--db", str(kueue_store), "--capacity", str(capacity), "--no-store", "--out",
                str(tmp_path / "a"))
    b = gpulens("plan", "--db", str(kueue_store), "--capacity", str(capacity), "--no-store", "--out",
                str(tmp_path / "b"))
    assert a.returncode == b.returncode

    def strip(text: str, out: str) -> str:  # the run's own --out folder is named in its output
        return "\n".join(line.replace(out, "OUT") for line in text.splitlines()
                         if "generated" not in line and "applied-at" not in line)

    assert strip(a.stdout, str(tmp_path / "a")) == strip(b.stdout, str(tmp_path / "b"))
