"""The plan's inputs from the store: capacity per flavor and resource (minus drains), demand, prices."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

import duckdb

from gpulens.analytics.inventory import short_model
from gpulens.analytics.plan.model import PoolCapacity, QueueDemand
from gpulens.analytics.plan.policy import CapacityFile
from gpulens.analytics.prices import load_price_book
from gpulens.analytics.quota import QuotaSettings, load_quota_evidence, recommend_quota

_UNITS_SQL = """
WITH dev AS (
    SELECT d.node, d.gpu_uuid, d.kind, d.profile, d.gpu_equivalents, d.gpu_model,
           coalesce(g.replicas, 1) AS replicas,
           count(*) OVER (PARTITION BY d.gpu_uuid, d.gpu_instance_id) AS cis
    FROM devices d LEFT JOIN gpus g USING (gpu_uuid)
    WHERE d.last_seen IS NULL OR d.last_seen >= $start
)
SELECT node, gpu_uuid,
       CASE WHEN kind = 'gpu' THEN 'nvidia.com/gpu'
            WHEN cis > 1 THEN 'nvidia.com/mig-' || CAST(round(gpu_equivalents * 7) AS INTEGER) || 'c.' || profile
            ELSE 'nvidia.com/mig-' || profile END AS resource,
       sum(replicas) AS units, sum(gpu_equivalents) AS ge, any_value(gpu_model) AS gpu_model
FROM dev GROUP BY ALL ORDER BY ALL
"""


@dataclass(frozen=True)
class DeviceUnits:
    """Units of one resource that one GPU advertises (replicas counted), and their GPU-equivalents."""

    node: str
    gpu_uuid: str
    resource: str
    units: int
    ge: float
    gpu_model: str


def _table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]).fetchone()
    return bool(row and row[0])


def latest_time(con: duckdb.DuckDBPyConnection) -> datetime | None:
    row = con.execute(
        "SELECT greatest((SELECT max(ts) FROM device_samples), (SELECT max(ts) FROM quota_snapshots))"
    ).fetchone()
    return row[0] if row else None


def flavor_nodes(con: duckdb.DuckDBPyConnection, flavors: Iterable[str]) -> tuple[dict[str, list[str]], list[str]]:
    """Nodes of each flavor: nodes whose labels hold the flavor's nodeLabels, else nodes whose pool is its name."""
    nodes = con.execute("SELECT node, pool, labels FROM nodes ORDER BY node").fetchall()
    selectors: dict[str, dict[str, str]] = {}
    if _table_exists(con, "resource_flavors"):
        for flavor, labels in con.execute("SELECT flavor, node_labels FROM resource_flavors").fetchall():
            selectors[str(flavor)] = _json_map(labels)
    out: dict[str, list[str]] = {}
    notes = []
    for flavor in sorted(set(flavors)):
        if flavor in selectors:
            want = selectors[flavor]
            out[flavor] = [n for n, _, labels in nodes if want.items() <= _json_map(labels).items()]
        else:
            out[flavor] = [n for n, pool, _ in nodes if pool == flavor]
    owners: dict[str, list[str]] = defaultdict(list)
    for flavor, names in out.items():
        for n in names:
            owners[n].append(flavor)
    for n, fl in sorted(owners.items()):
        if len(fl) > 1:
            notes.append(f"node {n} matches flavors {', '.join(fl)}: its devices count in each")
    return out, notes


def _json_map(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    data = json.loads(raw) if isinstance(raw, str) else raw
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def drained_gpus(con: duckdb.DuckDBPyConnection) -> tuple[set[str], set[str], str | None]:
    """GPUs and whole nodes that the latest ``health`` run marks as drain candidates, and that run's id."""
    if not _table_exists(con, "health"):
        return set(), set(), None
    row = con.execute("SELECT run_id FROM health ORDER BY window_end DESC, run_id DESC LIMIT 1").fetchone()
    if not row:
        return set(), set(), None
    rows = con.execute(
        "SELECT scope, node, gpu_uuid FROM health WHERE run_id = ? AND drain_candidate", [row[0]]
    ).fetchall()
    gpus = {str(g) for scope, _, g in rows if scope == "gpu" and g}
    gpu_nodes = {str(n) for scope, n, _ in rows if scope == "gpu"}
    nodes = {str(n) for scope, n, _ in rows if scope == "node" and n not in gpu_nodes}
    return gpus, nodes, str(row[0])


def inventory_capacity(
    con: duckdb.DuckDBPyConnection, flavors: Iterable[str], window_start: datetime, hours_per_month: float
) -> tuple[dict[tuple[str, str], PoolCapacity], list[str]]:
    """Capacity per (flavor, resource) from the devices on each flavor's nodes, drain candidates taken out."""
    members, notes = flavor_nodes(con, flavors)
    units = [DeviceUnits(*r) for r in con.execute(_UNITS_SQL, {"start": window_start}).fetchall()]
    gpus, nodes, health_run = drained_gpus(con)
    if health_run is None:
        notes.append("no health results in the store: drain candidates not taken out (run gpulens analyze)")
    prices = load_price_book(con, None)
    out = {}
    for flavor, node_names in sorted(members.items()):
        mine = set(node_names)
        per_res: dict[str, list[DeviceUnits]] = defaultdict(list)
        for u in units:
            if u.node in mine:
                per_res[u.resource].append(u)
        for resource, rows in sorted(per_res.items()):
            physical = sum(u.units for u in rows)
            out_units = {u for u in rows if u.gpu_uuid in gpus or u.node in nodes}
            per_node: dict[str, int] = defaultdict(int)
            for u in rows:
                if u not in out_units:
                    per_node[u.node] += u.units
            ge = sum(u.ge for u in rows)
            model = short_model(rows[0].gpu_model)
            price = ge / physical * prices.list_for(model) * hours_per_month if physical else None
            out[(flavor, resource)] = PoolCapacity(
                flavor, resource, physical, sum(u.units for u in out_units), nodes=len(per_node),
                largest_node=max(per_node.values(), default=0), unit_price_month=price, source="inventory",
                drained_nodes=tuple(sorted({u.node for u in out_units})),
            )
    return out, notes


def apply_capacity_file(
    pools: dict[tuple[str, str], PoolCapacity], file: CapacityFile
) -> dict[tuple[str, str], PoolCapacity]:
    """``--capacity`` values replace (or supply) the store's; the file's numbers are taken as they are."""
    out = dict(pools)
    for flavor, resources in file.flavors.items():
        for resource, units in resources.items():
            known = out.get((flavor, resource))
            largest = file.largest_node.get(flavor, {}).get(resource)
            out[(flavor, resource)] = PoolCapacity(
                flavor, resource, units, 0,
                nodes=None if largest is None and known is None else (known.nodes if known else None),
                largest_node=largest if largest is not None else (known.largest_node if known else None),
                unit_price_month=known.unit_price_month if known else None, source="capacity file",
            )
    return out


def add_capacity(
    pools: dict[tuple[str, str], PoolCapacity], extra: dict[tuple[str, str], int]
) -> dict[tuple[str, str], PoolCapacity]:
    """What-if: ``extra`` units on top of each named flavor and resource."""
    out = dict(pools)
    for key, units in extra.items():
        base = out.get(key) or PoolCapacity(key[0], key[1], 0, source="what-if")
        out[key] = replace(base, physical=base.physical + units)
    return out


def queue_demands(
    con: duckdb.DuckDBPyConnection, start: datetime, end: datetime, settings: QuotaSettings
) -> list[QueueDemand]:
    """Per ClusterQueue entry: current quota and demand as ``recommend`` decides it (its rules included)."""
    out = []
    for ev in load_quota_evidence(con, start, end, settings):
        if ev.key.object_kind != "ClusterQueue":
            continue
        rec = recommend_quota(ev, settings)
        out.append(QueueDemand(
            queue=ev.key.name, tenant=ev.tenant, flavor=ev.key.flavor, resource=ev.key.resource,
            current=rec.current, demand=rec.recommended, demand_p50=ev.demand_lower, demand_p95=ev.demand_target,
            in_use=ev.usage_now, pending_now=ev.pending_now,
            pending_share=ev.pending_buckets / ev.buckets if ev.buckets else 0.0,
            evidence_days=rec.confidence.history_days,
            evidence_step_seconds=settings.bucket_seconds, borrowing_limit=ev.borrowing_limit,
            lending_limit=ev.lending_limit, source=rec,
        ))
    return out
