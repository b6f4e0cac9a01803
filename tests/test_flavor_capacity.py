"""Capacity per flavor as Kueue matches nodes: shaped like the demo fleet (an exclusive H200 pool, an MPS H200 node,
a MIG H200 node, a loose flavor whose nodeLabels every H200 node satisfies), on a real DuckDB store."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.plan.inputs import FleetCapacity, inventory_capacity
from analytics.prices import load_price_book
from analytics.recommend import RecommendSettings, recommend
from collector.store import Store

END = datetime(2026, 3, 1)
START = END - timedelta(days=14)
H200 = {"nvidia.com/gpu.product": "NVIDIA-H200"}
MIG3 = "nvidia.com/mig-3g.71gb"


def _node(node: str, sharing: str, extra: dict[str, str]) -> dict[str, object]:
    labels = {**H200, "gpulens.io/sharing-mode": sharing, **extra}
    return {"node": node, "pool": node.rsplit("-", 1)[0], "gpu_model": "H200", "sharing_mode": sharing,
            "labels": json.dumps(labels)}


def _gpus(node: str, sharing: str, replicas: int = 1, mig: tuple[str, ...] = ()) -> tuple[list[dict], list[dict]]:
    gpus, devices = [], []
    for i in range(8):
        uuid = f"GPU-{node}-{i}"
        gpus.append({"gpu_uuid": uuid, "node": node, "gpu_index": i, "gpu_model": "H200", "sharing_mode": sharing,
                     "replicas": replicas})
        if mig:
            for gi, profile in enumerate(mig):
                devices.append({"device_id": f"MIG-{node}-{i}-{gi}", "gpu_uuid": uuid, "node": node,
                                "gpu_model": "H200", "kind": "mig", "profile": profile, "gpu_instance_id": gi,
                                "compute_instance_id": 0, "gpu_equivalents": int(profile[0]) / 7,
                                "sharing_mode": "mig"})
        else:
            devices.append({"device_id": uuid, "gpu_uuid": uuid, "node": node, "gpu_model": "H200", "kind": "gpu",
                            "profile": "gpu", "gpu_equivalents": 1.0, "sharing_mode": sharing})
    return gpus, devices


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict]) -> None:
    """Insert rows whose keys (column names, constants of this module) are bound by name; the values as parameters."""
    for row in rows:
        sql = f"INSERT INTO {table} ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})"  # noqa: S608
        con.execute(sql, list(row.values()))


def build_fleet(path: Path, *, flavors: dict[str, dict[str, str]], drained: tuple[str, ...] = (),
                warned: tuple[str, ...] = ()) -> Path:
    """Three H200 training nodes (exclusive), one MPS node (2 replicas), one MIG node (7 x 1g.18gb)."""
    with Store(str(path)):
        pass
    nodes = [_node(f"h200-train-{i}", "exclusive", {}) for i in range(3)]
    nodes += [_node("h200-mps-0", "mps", {"nvidia.com/mps.replicas": "2"}),
              _node("h200-mig-0", "mig", {"nvidia.com/mig.strategy": "mixed"})]
    parts = [_gpus(f"h200-train-{i}", "exclusive") for i in range(3)]
    parts += [_gpus("h200-mps-0", "mps", replicas=2), _gpus("h200-mig-0", "mig", mig=("1g.18gb",) * 7)]
    with duckdb.connect(str(path)) as con:
        _insert(con, "nodes", nodes)
        _insert(con, "gpus", [g for gs, _ in parts for g in gs])
        _insert(con, "devices", [d for _, ds in parts for d in ds])
        _insert(con, "resource_flavors", [{"flavor": f, "node_labels": json.dumps(lb)} for f, lb in flavors.items()])
        con.execute("CREATE TABLE health (run_id VARCHAR, window_end TIMESTAMP, scope VARCHAR, node VARCHAR, "
                    "gpu_uuid VARCHAR, state VARCHAR, drain_candidate BOOLEAN)")
        rows = [("h1", END, "gpu", u.rsplit("-", 1)[0].removeprefix("GPU-"), u, "drain", True) for u in drained]
        rows += [("h1", END, "gpu", u.rsplit("-", 1)[0].removeprefix("GPU-"), u, "warn", False) for u in warned]
        rows += [("h1", END, "gpu", "h200-train-2", "GPU-h200-train-2-0", "ok", False)]
        con.executemany("INSERT INTO health VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    return path


LOOSE = {"h200-80gb": H200,
         "h200-mps": {**H200, "nvidia.com/mps.replicas": "2"},
         "h200-mig": {**H200, "nvidia.com/mig.strategy": "mixed"}}
EXACT = {"h200-80gb": {**H200, "gpulens.io/sharing-mode": "exclusive"},
         "h200-mps": {**H200, "nvidia.com/mps.replicas": "2"},
         "h200-mig": {**H200, "nvidia.com/mig.strategy": "mixed"}}


def capacity(path: Path) -> FleetCapacity:
    with duckdb.connect(str(path), read_only=True) as con:
        return inventory_capacity(con, ["h200-80gb", "h200-mps", "h200-mig"], START, hours_per_month=730.0)


def test_a_node_that_two_flavors_match_counts_in_neither_and_is_stated_once(tmp_path: Path) -> None:
    fleet = capacity(build_fleet(tmp_path / "s.duckdb", flavors=LOOSE))
    gpu = fleet.pools[("h200-80gb", "nvidia.com/gpu")]
    assert gpu.physical == 24 and gpu.nodes == 3 and gpu.largest_node == 8  # the MPS node's 16 replicas are not in it
    assert ("h200-mps", "nvidia.com/gpu") not in fleet.pools
    assert ("h200-mig", "nvidia.com/mig-1g.18gb") not in fleet.pools
    conflicts = [n for n in fleet.notes if "configuration error" in n]
    assert conflicts == [
        "node h200-mig-0 matches flavors h200-80gb, h200-mig (the nodeLabels of each select it): a configuration "
        "error; its devices are counted in none of them",
        "node h200-mps-0 matches flavors h200-80gb, h200-mps (the nodeLabels of each select it): a configuration "
        "error; its devices are counted in none of them",
    ]


def test_the_unit_price_of_a_flavor_follows_its_own_devices(tmp_path: Path) -> None:
    loose = capacity(build_fleet(tmp_path / "loose.duckdb", flavors=LOOSE)).pools[("h200-80gb", "nvidia.com/gpu")]
    exact = capacity(build_fleet(tmp_path / "exact.duckdb", flavors=EXACT)).pools[("h200-80gb", "nvidia.com/gpu")]
    assert loose.unit_price_month == pytest.approx(exact.unit_price_month)
    with duckdb.connect(str(tmp_path / "exact.duckdb"), read_only=True) as con:
        whole_gpu_month = load_price_book(con, None).list_for("H200") * 730.0
    assert exact.unit_price_month == pytest.approx(whole_gpu_month)  # 24 whole GPUs: one GPU's price per unit


def test_disjoint_flavors_each_count_their_own_devices(tmp_path: Path) -> None:
    fleet = capacity(build_fleet(tmp_path / "s.duckdb", flavors=EXACT))
    assert fleet.pools[("h200-80gb", "nvidia.com/gpu")].physical == 24
    assert fleet.pools[("h200-mps", "nvidia.com/gpu")].physical == 16
    assert fleet.pools[("h200-mig", "nvidia.com/mig-1g.18gb")].physical == 56
    assert not [n for n in fleet.notes if "configuration error" in n]


def test_gpus_on_the_drain_or_warn_list_are_not_capacity_and_the_note_says_how_many_and_why(tmp_path: Path) -> None:
    path = build_fleet(tmp_path / "s.duckdb", flavors=EXACT, drained=("GPU-h200-train-0-3",),
                       warned=("GPU-h200-train-1-5", "GPU-h200-mps-0-1"))
    fleet = capacity(path)
    gpu = fleet.pools[("h200-80gb", "nvidia.com/gpu")]
    assert (gpu.physical, gpu.drained, gpu.capacity) == (24, 2, 22)
    assert gpu.largest_node == 8  # h200-train-2 keeps all eight
    mps = fleet.pools[("h200-mps", "nvidia.com/gpu")]
    assert (mps.physical, mps.drained, mps.capacity) == (16, 2, 14)  # one GPU's two replicas
    assert ("h200-80gb nvidia.com/gpu: 2 of 24 units left out of capacity (1 on the drain list, 1 on the warn list; "
            "health run h1, nodes h200-train-0, h200-train-1)") in fleet.notes
    assert any(n.startswith("h200-mps nvidia.com/gpu: 2 of 16 units left out") and "2 on the warn list" in n
               for n in fleet.notes), fleet.notes


def test_a_flavor_lacks_a_mig_profile_its_nodes_do_not_have(tmp_path: Path) -> None:
    fleet = capacity(build_fleet(tmp_path / "s.duckdb", flavors=EXACT))
    assert fleet.lacks("h200-mig", MIG3) == f"the flavor has no {MIG3}"
    assert fleet.lacks("h200-mig", "nvidia.com/mig-1g.18gb") is None
    assert fleet.lacks("no-such-flavor", MIG3) is None  # no node at all: capacity unknown, not "has none"


def test_a_flavor_whose_only_node_another_flavor_matches_too_has_nothing_counted_and_says_why(tmp_path: Path) -> None:
    fleet = capacity(build_fleet(tmp_path / "s.duckdb", flavors=LOOSE))
    assert fleet.lacks("h200-mps", "nvidia.com/gpu") == (
        "the flavor has no nvidia.com/gpu counted: node(s) h200-mps-0 match another flavor too (a configuration "
        "error) and count in neither")


def test_recommend_never_raises_a_quota_for_a_device_the_flavor_does_not_have(tmp_path: Path) -> None:
    path = build_fleet(tmp_path / "s.duckdb", flavors=EXACT)
    with duckdb.connect(str(path)) as con:  # every 5 minutes for 14 days: 2 of 2 in use, 1 more pending
        steps = {"start": START, "n": 14 * 24 * 12}
        for resource in (MIG3, "nvidia.com/mig-1g.18gb"):
            con.execute(
                "INSERT INTO quota_snapshots (ts, object_kind, object_namespace, object_name, tenant, flavor, resource, "
                "nominal_quota, usage, source) SELECT $start + to_minutes(5 * i), 'ClusterQueue', '', 'vision', "
                "'vision', 'h200-mig', $resource, 2, 2, 'test' FROM range($n) t(i)", {**steps, "resource": resource})
            con.execute(
                "INSERT INTO pending_demand (ts, tenant, cluster_queue, namespace, flavor, resource, profile, quantity, "
                "workloads, source) SELECT $start + to_minutes(5 * i), 'vision', 'vision', 'vision', 'h200-mig', "
                "$resource, $profile, 1, 1, 'test' FROM range($n) t(i)",
                {**steps, "resource": resource, "profile": resource.removeprefix("nvidia.com/mig-")})
    report = recommend(path, RecommendSettings(window_end=END, targets=("kueue",), store_results=False))
    recs = {q.key.resource: q for q in report.quotas}
    assert recs["nvidia.com/mig-1g.18gb"].action == "increase"  # the flavor has these: the raise stands
    missing = recs[MIG3]
    assert (missing.action, missing.current, missing.next_value) == ("hold", 2, 2)
    assert any(r.startswith(f"the flavor has no {MIG3}") for r in missing.reasons), missing.reasons


def test_recommend_never_raises_a_quota_past_the_healthy_capacity_of_its_flavor(tmp_path: Path) -> None:
    # h200-mig has 8 GPUs x 7 x 1g.18gb = 56 units; two GPUs on the drain and warn lists leave 42.
    path = build_fleet(tmp_path / "s.duckdb", flavors=EXACT, drained=("GPU-h200-mig-0-0",), warned=("GPU-h200-mig-0-1",))
    resource = "nvidia.com/mig-1g.18gb"
    with duckdb.connect(str(path)) as con:  # 40 of 40 in use, 30 more pending, for 14 days
        steps = {"start": START, "n": 14 * 24 * 12, "resource": resource}
        con.execute(
            "INSERT INTO quota_snapshots (ts, object_kind, object_namespace, object_name, tenant, flavor, resource, "
            "nominal_quota, usage, source) SELECT $start + to_minutes(5 * i), 'ClusterQueue', '', 'vision', "
            "'vision', 'h200-mig', $resource, 40, 40, 'test' FROM range($n) t(i)", steps)
        con.execute(
            "INSERT INTO pending_demand (ts, tenant, cluster_queue, namespace, flavor, resource, profile, quantity, "
            "workloads, source) SELECT $start + to_minutes(5 * i), 'vision', 'vision', 'vision', 'h200-mig', "
            "$resource, '1g.18gb', 30, 3, 'test' FROM range($n) t(i)", steps)
    report = recommend(path, RecommendSettings(window_end=END, targets=("kueue",), store_results=False))
    (q,) = [q for q in report.quotas if q.key.resource == resource]
    assert (q.action, q.current, q.next_value) == ("increase", 40, 42)
    assert q.recommended is not None and q.recommended <= 42
    assert q.reasons[-1] == ("raise capped at the flavor's capacity 42 (of 56 units on the flavor's nodes, 14 on the "
                             "drain or warn list left out): next 42")
