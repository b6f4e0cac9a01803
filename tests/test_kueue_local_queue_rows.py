"""LocalQueue rows from Kueue's metrics sit beside the inventory's in ``quota_snapshots``: they never change
what the quota evidence counts (they do not name a ClusterQueue, so pods map through the inventory's rows)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import duckdb

from analytics.facts import bind_facts
from analytics.quota import QuotaSettings, load_quota_evidence
from tests.support.recommend_store import StoreBuilder

BUCKETS = 15 * 288


def test_a_pending_pod_counts_once_when_kueue_metrics_also_report_its_local_queue(tmp_path: Path) -> None:
    store = StoreBuilder(tmp_path / "pods.duckdb")
    store.quota("ClusterQueue", "team-a", "nvidia.com/gpu", flavor="h100", tenant="team-a", nominal=16,
                usage=[4] * BUCKETS)
    store.quota("ResourceQuota", "gpu-quota", "nvidia.com/gpu", namespace="ns-a", tenant="team-a", nominal=16,
                usage=[2] * BUCKETS)
    store.quota("LocalQueue", "lq-a", "nvidia.com/gpu", namespace="ns-a", flavor="h100", nominal=0,
                usage=[None], annotations={"clusterQueue": "team-a"})  # collect --kubernetes
    store.quota("LocalQueue", "lq-a", "nvidia.com/gpu", namespace="ns-a", flavor="h100", nominal=0,
                usage=[4], annotations={"pendingWorkloads": "1"}, first=1)  # collect --prometheus
    path = store.save()
    with duckdb.connect(str(path)) as con:
        bind_facts(con, None)
        con.execute(
            """INSERT INTO pod_snapshots (ts, namespace, pod, phase, queue, gpu_requests, source)
               VALUES (?, 'ns-a', 'waiting-0', 'Pending', 'lq-a', '{"nvidia.com/gpu": 8}', 'kubernetes')""",
            [store.ts(BUCKETS - 10)],
        )
        end = store.ts(BUCKETS)
        evidence = {e.key.object_kind: e for e in load_quota_evidence(con, end - timedelta(days=16), end,
                                                                      QuotaSettings())}
    assert evidence["ClusterQueue"].demand_max == 12  # 4 in use + the pending pod's 8, once
    assert evidence["ResourceQuota"].demand_max == 10  # its namespace: 2 in use + the same 8, once
