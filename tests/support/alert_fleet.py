"""A small store whose latest health run finds every node healthy, and Alertmanager webhook bodies for it.

What the remediation service needs from the store is the fleet (nodes and their flavors) and the health
run's verdicts; the alerts bring the faults. Built with the real schema and result tables.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb

from analytics.remediation.policy import TAINT_KEY
from analytics.result_tables import create_result_tables, insert_rows
from collector.schema import create_schema
from tests.fakes.kubernetes_api import FakeKubernetesApi

RUN = "alertfleet000001"


def node_name(pool: str, i: int) -> str:
    return f"{pool}-node-{i:02d}"


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{_digest(node)[:8]}-0000-4000-8000-{index:012d}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def healthy_fleet_store(path: Path, pools: dict[str, int], window_end: datetime,
                        hours: float = 24.0) -> list[str]:
    """A store at ``path`` with ``pools`` (pool -> node count) and one health run over the ``hours`` before
    ``window_end`` in which every node is ``ok``; returns the node names."""
    start = window_end - timedelta(hours=hours)
    nodes = [node_name(pool, i) for pool, n in pools.items() for i in range(n)]
    with duckdb.connect(str(path)) as con:
        create_schema(con, str(path))
        create_result_tables(con)
        for pool, n in pools.items():
            for i in range(n):
                con.execute("INSERT INTO nodes (node, pool, gpu_model) VALUES (?, ?, 'H100')", [node_name(pool, i), pool])
        con.execute("INSERT INTO analysis_runs VALUES (?, ?, ?, 3600, 60, '{}', 'store', NULL, ?)",
                    [RUN, start, window_end, window_end])
        rows = [{"run_id": RUN, "window_start": start, "window_end": window_end, "scope": "node", "node": n,
                 "gpu_uuid": None, "state": "ok", "drain_candidate": False, "evidence": json.dumps([]),
                 "first_evidence_ts": None, "last_evidence_ts": None, "trend_start_ts": None, "warning_ts": None,
                 "failure_ts": None, "lead_seconds": None} for n in nodes]
        insert_rows(con, "health", rows)
    return nodes


def alert(name: str, node: str, starts: datetime, *, status: str = "firing", gpu: str = "",
          ends: datetime | None = None, **labels: str) -> dict[str, Any]:
    """One alert as Alertmanager's webhook sends it (fingerprint from its labels, as Alertmanager does)."""
    all_labels = {"alertname": name, "node": node, "severity": "critical", **({"gpu": gpu} if gpu else {}), **labels}
    return {"status": status, "labels": all_labels,
            "annotations": {"summary": f"{name} on {node}", "description": f"{name} on {node} ({gpu or 'node'})"},
            "startsAt": starts.strftime("%Y-%m-%dT%H:%M:%S.123456789Z"),
            "endsAt": ends.strftime("%Y-%m-%dT%H:%M:%SZ") if ends else "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus/graph", "fingerprint": _digest(json.dumps(all_labels, sort_keys=True))[:16]}


def webhook(alerts: list[dict[str, Any]], group_key: str = '{}:{alertname="GpuDown"}') -> bytes:
    """An Alertmanager webhook body (version 4) carrying ``alerts``."""
    firing = any(a["status"] == "firing" for a in alerts)
    return json.dumps({"version": "4", "groupKey": group_key, "truncatedAlerts": 0,
                       "status": "firing" if firing else "resolved", "receiver": "gpulens-remediation",
                       "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {},
                       "externalURL": "http://alertmanager:9093", "alerts": alerts}).encode()


def put_nodes(fake: FakeKubernetesApi, nodes: list[str]) -> None:
    """Every node as a Ready Node of its pool, carrying the pool's own taint (which gpulens keeps)."""
    for n in nodes:
        fake.put(f"/api/v1/nodes/{n}", {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {"pool": n.split("-")[0]}},
            "spec": {"taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}})


def our_taints(fake: FakeKubernetesApi, node: str) -> list[dict[str, Any]]:
    """The gpulens taints of a Node as the fake API server holds it."""
    return [t for t in fake.objects[f"/api/v1/nodes/{node}"]["spec"].get("taints") or [] if t["key"] == TAINT_KEY]
