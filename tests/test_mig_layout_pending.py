"""A MIG move onto a profile whose queue already has pending work says so, in the plan and in the patch."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import duckdb

from analytics.miglayout import InstanceDemand
from analytics.miglayout.fleet import with_pending
from analytics.miglayout.workload_patches import workload_patch
from collector.store import Store

END = datetime(2026, 3, 1)
START = END - timedelta(days=14)


def demand(tenant: str, profile: str) -> InstanceDemand:
    return InstanceDemand(f"{tenant}/Deployment/chat", tenant, "Deployment", "chat", tenant, "H200", profile, 1, "gpu",
                          1.0, ("main",))


def store_with_pending(path: Path) -> Path:
    with Store(str(path)):
        pass
    with duckdb.connect(str(path)) as con:  # team-a's queue waits for 1g.18gb in 12 samples, at most 3 of them
        con.execute(
            "INSERT INTO pending_demand (ts, tenant, cluster_queue, namespace, flavor, resource, profile, gpu_model, "
            "quantity, workloads, source) SELECT $start + to_minutes(5 * i), 'team-a', 'team-a-cq', 'team-a', "
            "'h200-mig', 'nvidia.com/mig-1g.18gb', '1g.18gb', 'NVIDIA H200', 1 + i % 3, 1, 'test' FROM range(12) t(i)",
            {"start": END - timedelta(hours=1)})
    return path


def test_a_move_onto_a_profile_its_queue_is_waiting_for_says_so_in_the_plan_and_the_patch(tmp_path: Path) -> None:
    path = store_with_pending(tmp_path / "s.duckdb")
    with duckdb.connect(str(path), read_only=True) as con:
        waiting, other_profile, other_tenant = with_pending(
            con, START, END, [demand("team-a", "1g.18gb"), demand("team-a", "2g.35gb"), demand("team-b", "1g.18gb")])
    assert waiting.pending == ("queue team-a-cq has pending work for 1g.18gb in 12 sample(s) (up to 3): the move "
                               "competes with it")
    assert other_profile.pending is None and other_tenant.pending is None
    assert f"# Pending work: {waiting.pending}." in workload_patch(waiting).header
    assert "Pending" not in workload_patch(other_profile).header
