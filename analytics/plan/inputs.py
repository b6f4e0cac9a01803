"""The plan's inputs from the store: capacity per flavor and resource (minus drain and warn lists), demand."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

import duckdb

from analytics.inventory import short_model
from analytics.plan.flavor_nodes import FlavorNodes, match_flavor_nodes, table_exists
from analytics.plan.model import PoolCapacity, QueueDemand
from analytics.plan.policy import CapacityFile
from analytics.prices import PriceBook, run_price_book
from analytics.quota import QuotaEvidence, QuotaSettings, load_quota_evidence, recommend_quota
from collector.queue_systems import CLUSTER_QUEUE

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
       sum(replicas) AS units, sum(gpu_equivalents) AS ge, any_value(gpu_model) AS gpu_model,
       (SELECT any_value(n.dedicated_tenant) FROM nodes n WHERE n.node = dev.node) AS dedicated_tenant
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
    dedicated_tenant: str | None = None
    """The tenant its node is dedicated to (node label ``gpulens.io/dedicated-tenant``), if any."""


def latest_time(con: duckdb.DuckDBPyConnection) -> datetime | None:
    row = con.execute(
        "SELECT greatest((SELECT max(ts) FROM device_samples), (SELECT max(ts) FROM quota_snapshots))"
    ).fetchone()
    return row[0] if row else None


@dataclass(frozen=True)
class Unhealthy:
    """What the latest ``health`` run keeps out of plan capacity: GPUs and whole nodes on its drain or warn list."""

    gpus: Mapping[str, str]
    """GPU UUID -> its state (``drain``, ``warn``, or ``watch`` for a raised early-warning trend)."""
    nodes: Mapping[str, str]
    """Node -> its state, where the node itself is listed and none of its GPUs is."""
    run_id: str | None

    def state_of(self, u: DeviceUnits) -> str | None:
        return self.gpus.get(u.gpu_uuid) or self.nodes.get(u.node)


def unhealthy_devices(con: duckdb.DuckDBPyConnection) -> Unhealthy:
    """GPUs and whole nodes that the latest ``health`` run lists as drain candidates or warns about."""
    if not table_exists(con, "health"):
        return Unhealthy({}, {}, None)
    row = con.execute("SELECT run_id FROM health ORDER BY window_end DESC, run_id DESC LIMIT 1").fetchone()
    if not row:
        return Unhealthy({}, {}, None)
    rows = con.execute(
        "SELECT scope, node, gpu_uuid, CASE WHEN state IN ('warn', 'drain') THEN state ELSE 'watch' END FROM health "
        "WHERE run_id = ? AND (drain_candidate OR state IN ('warn', 'drain'))", [row[0]]
    ).fetchall()
    gpus = {str(g): str(st) for scope, _, g, st in rows if scope == "gpu" and g}
    gpu_nodes = {str(n) for scope, n, _, _ in rows if scope == "gpu"}
    nodes = {str(n): str(st) for scope, n, _, st in rows if scope == "node" and n not in gpu_nodes}
    return Unhealthy(gpus, nodes, str(row[0]))


@dataclass(frozen=True)
class FleetCapacity:
    """Capacity per (flavor, resource) from the devices of each flavor's own nodes, and what was left out."""

    pools: Mapping[tuple[str, str], PoolCapacity]
    flavor_nodes: FlavorNodes
    notes: tuple[str, ...]

    def lacks(self, flavor: str, resource: str) -> str | None:
        """Why ``flavor`` has no ``resource`` where the inventory shows devices for it but none of that resource;
        None where it has some, or where the flavor's nodes show no devices at all (capacity unknown)."""
        if (flavor, resource) in self.pools:
            return None
        shared = self.flavor_nodes.shared_with_others(flavor)
        if shared:
            return (f"the flavor has no {resource} counted: node(s) {', '.join(shared)} match another flavor too "
                    "(a configuration error) and count in neither")
        has_devices = any(f == flavor for f, _ in self.pools)
        return f"the flavor has no {resource}" if has_devices else None


def inventory_capacity(
    con: duckdb.DuckDBPyConnection, flavors: Iterable[str], window_start: datetime, hours_per_month: float
) -> FleetCapacity:
    """Capacity per (flavor, resource): the devices on the nodes that the flavor alone matches, GPUs and nodes
    on the latest health run's drain or warn list taken out; the unit price follows those devices."""
    matched = match_flavor_nodes(con, flavors)
    notes = matched.notes()
    units = [DeviceUnits(*r) for r in con.execute(_UNITS_SQL, {"start": window_start}).fetchall()]
    unhealthy = unhealthy_devices(con)
    if unhealthy.run_id is None:
        notes.append("no health results in the store: drain and warn lists not taken out (run gpulens analyze)")
    prices = run_price_book(con)  # the book the newest analysis run priced with
    out = {}
    for flavor, node_names in sorted(matched.members.items()):
        mine = set(node_names)
        out.update(_pools_of(flavor, [u for u in units if u.node in mine], unhealthy, prices, hours_per_month, notes))
    return FleetCapacity(out, matched, tuple(notes))


def cluster_capacity(
    con: duckdb.DuckDBPyConnection, name: str, window_start: datetime, hours_per_month: float
) -> tuple[dict[tuple[str, str], PoolCapacity], list[str]]:
    """Capacity per resource of every node in the store, as one pool called ``name`` (for queues that share the
    whole cluster, as KAI's top-level queues and Volcano's queues do); the same drain and warn lists taken out."""
    units = [DeviceUnits(*r) for r in con.execute(_UNITS_SQL, {"start": window_start}).fetchall()]
    notes: list[str] = []
    pools = _pools_of(name, units, unhealthy_devices(con), run_price_book(con), hours_per_month, notes)
    return pools, notes


def _pools_of(
    flavor: str, units: list[DeviceUnits], unhealthy: Unhealthy, prices: PriceBook, hours_per_month: float,
    notes: list[str],
) -> dict[tuple[str, str], PoolCapacity]:
    """One pool per resource of ``units``; a note in ``notes`` for every pool with units left out or unpriced."""
    per_res: dict[str, list[DeviceUnits]] = defaultdict(list)
    for u in units:
        per_res[u.resource].append(u)
    out = {}
    for resource, rows in sorted(per_res.items()):
        pool = _pool(flavor, resource, rows, unhealthy, prices.list_for, hours_per_month)
        out[(flavor, resource)] = pool
        unpriced = prices.unpriced(u.gpu_model for u in rows)
        if unpriced:
            notes.append(f"{flavor} {resource}: unpriced ({', '.join(unpriced)} has no price in the book): "
                         "no unit price, so no budget is checked for it")
        if pool.drained:
            notes.append(_left_out_note(pool, rows, unhealthy))
    return out


def _pool(
    flavor: str, resource: str, rows: list[DeviceUnits], unhealthy: Unhealthy,
    list_price: Callable[[str], float | None], hours_per_month: float,
) -> PoolCapacity:
    """One flavor's capacity of one resource; the unit price is the GPU-equivalent-weighted price of its devices
    (None where one of them is unpriced)."""
    physical = sum(u.units for u in rows)
    out_units = [u for u in rows if unhealthy.state_of(u)]
    per_node: dict[str, int] = defaultdict(int)
    for u in rows:
        if not unhealthy.state_of(u):
            per_node[u.node] += u.units
    unit_prices = [list_price(short_model(u.gpu_model)) for u in rows]
    value = None if None in unit_prices else sum(u.ge * (p or 0.0) for u, p in zip(rows, unit_prices, strict=True))
    return PoolCapacity(
        flavor, resource, physical, sum(u.units for u in out_units), nodes=len(per_node),
        largest_node=max(per_node.values(), default=0),
        unit_price_month=value / physical * hours_per_month if physical and value is not None else None,
        source="inventory",
        drained_nodes=tuple(sorted({u.node for u in out_units})),
        dedicated_tenant=_only({u.dedicated_tenant for u in rows}),
    )


def _only(values: set[str | None]) -> str | None:
    """The one value of ``values``, if it is the only one and not None."""
    return next(iter(values)) if len(values) == 1 else None


def _left_out_note(pool: PoolCapacity, rows: list[DeviceUnits], unhealthy: Unhealthy) -> str:
    """How many units of a pool the health run keeps out of capacity, and why."""
    why: dict[str, int] = defaultdict(int)
    for u in rows:
        state = unhealthy.state_of(u)
        if state:
            why[state] += u.units
    reasons = ", ".join(f"{n} {_STATE_WORDS[s]}" for s, n in sorted(why.items()))
    return (f"{pool.flavor} {pool.resource}: {pool.drained} of {pool.physical} units left out of capacity "
            f"({reasons}; health run {unhealthy.run_id}, nodes {', '.join(pool.drained_nodes)})")


_STATE_WORDS = {"drain": "on the drain list", "warn": "on the warn list", "watch": "under an early-warning trend"}


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
                dedicated_tenant=known.dedicated_tenant if known else None,
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
    con: duckdb.DuckDBPyConnection, start: datetime, end: datetime, settings: QuotaSettings,
    kinds: Collection[str] = (CLUSTER_QUEUE,), pool_of: Callable[[QuotaEvidence], str] | None = None,
) -> list[QueueDemand]:
    """Per queue entry of ``kinds``: current quota and demand as ``recommend`` decides it (its rules included);
    ``pool_of`` names the pool of an entry (default: its flavor)."""
    out = []
    for ev in load_quota_evidence(con, start, end, settings):
        if ev.key.object_kind not in kinds:
            continue
        rec = recommend_quota(ev, settings)
        out.append(QueueDemand(
            queue=ev.key.name, tenant=ev.tenant, flavor=pool_of(ev) if pool_of else ev.key.flavor,
            resource=ev.key.resource,
            current=rec.current, demand=rec.recommended, demand_p50=ev.demand_lower, demand_p95=ev.demand_target,
            in_use=ev.usage_now, pending_now=ev.pending_now,
            pending_share=ev.pending_buckets / ev.buckets if ev.buckets else 0.0,
            evidence_days=rec.confidence.history_days,
            evidence_step_seconds=settings.bucket_seconds, borrowing_limit=ev.borrowing_limit,
            lending_limit=ev.lending_limit, source=rec, kind=ev.key.object_kind,
            parent=ev.annotations.get("parentQueue") or None,
        ))
    return out
