"""Isolation risk 0..100 per GPU and per tenant: an additive rubric whose every term is listed.

Terms (weights in ``RiskWeights``): the GPU's sharing-mode base; other tenants on the same GPU;
other tenants on the same node or NVLink domain; missing tenancy layers (no NetworkPolicy in a
namespace, neither a dedicated pool nor a virtual cluster), or layers the Kubernetes inventory never
collected (weighed the same, named ``*_not_collected`` and saying so: unmeasured is not "none"); a telemetry blind spot (a shared GPU
whose use cannot be attributed per tenant); faults on a GPU shared by several tenants. When the sum
passes 100 a ``cap`` term with negative points brings it to exactly 100. A tenant's score is its
worst GPU seen from the tenant's side plus its own missing layers. All counts are over the window.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from itertools import chain

import duckdb

from gpulens.analytics.facts import Window
from gpulens.analytics.result_tables import append_columns, column_names
from gpulens.analytics.settings import HealthRules, RiskWeights


@dataclass(frozen=True)
class Term:
    term: str
    points: float
    reason: str


@dataclass(frozen=True)
class Risk:
    scope: str
    gpu_uuid: str | None
    node: str | None
    tenant: str | None
    sharing_mode: str | None
    terms: tuple[Term, ...]

    @property
    def score(self) -> float:
        return sum(t.points for t in self.terms)


def capped(terms: list[Term]) -> tuple[Term, ...]:
    """Append a ``cap`` term when the points pass 100, so the listed terms still sum to the score."""
    total = sum(t.points for t in terms)
    if total > 100:
        terms = [*terms, Term("cap", 100 - total, f"sum of {total:g} points capped at 100")]
    return tuple(terms)


@dataclass(frozen=True)
class _Gpu:
    gpu_uuid: str
    node: str
    mode: str
    domain: str | None
    blind: bool
    tenants: frozenset[str]
    faults: int
    fault_codes: tuple[int, ...]
    ordered: tuple[str, ...]
    """``tenants``, sorted."""


@dataclass(frozen=True)
class _Layers:
    namespaces_without_policy: tuple[str, ...]
    """Namespaces the inventory saw with no NetworkPolicy (measured)."""
    isolated: bool
    """Has a dedicated pool or a virtual cluster."""
    namespaces_not_collected: tuple[str, ...] = ()
    """Namespaces the inventory never saw: whether they have a NetworkPolicy is unknown."""
    pools_collected: bool = True
    """Whether node pools and virtual clusters were collected (``gpulens collect --kubernetes``)."""


COLLECT_HINT = "run `gpulens collect --kubernetes`"


def assess(
    con: duckdb.DuckDBPyConnection, window: Window, weights: RiskWeights, health_rules: HealthRules
) -> list[Risk]:
    """Device rows for every GPU in the inventory, tenant rows for every tenant that held a device."""
    gpus = _gpus(con, window, health_rules)
    layers = _Tenancy.of(_layers(con, window))
    by_place: dict[str, set[str]] = defaultdict(set)
    for g in gpus.values():
        by_place[f"node:{g.node}"] |= g.tenants
        if g.domain:
            by_place[f"nvlink:{g.domain}"] |= g.tenants
    near: dict[tuple[str, str | None], set[str]] = {}  # the same for every GPU of a node
    risks: list[Risk] = []
    # A tenant's row is its worst GPU: the first GPU (in order) of highest score. A GPU's own terms are
    # the same for each of its tenants and a tenant's layer terms the same on each of its GPUs, so a
    # score depends only on the GPU's points summed (in the terms' order) and on the tenant: the same
    # float sums as the rows. Per distinct GPU sum, the first GPU of each tenant is kept (set operations,
    # no loop over GPU x tenant pairs); per tenant, its highest score over those sums wins, the earliest
    # GPU among equal scores, and only the winner's terms are written out.
    order: list[tuple[_Gpu, set[str]]] = []
    first: dict[float, dict[str, int]] = defaultdict(dict)  # GPU sum -> tenant -> its first GPU with it
    memo: dict[tuple[str, ...], list[Term]] = {}
    memo_own: dict[str, list[float]] = {}  # a tenant's own layer points
    for g in gpus.values():
        place = (g.node, g.domain)
        if place not in near:
            near[place] = by_place[f"node:{g.node}"] | (by_place[f"nvlink:{g.domain}"] if g.domain else set())
        neighbours = near[place]
        terms = _device_terms(g, None, neighbours, layers, weights, memo)
        risks.append(Risk("device", g.gpu_uuid, g.node, None, g.mode, capped(terms)))
        if not g.tenants:
            continue
        # the GPU's own points: its row's terms less the layer terms (the same for each of its tenants)
        gpu_sum = sum(t.points for t in terms if t.term not in LAYER_TERMS)
        seen = first[gpu_sum]
        seen.update(dict.fromkeys(g.tenants.difference(seen), len(order)))
        order.append((g, neighbours))
    worst: dict[str, tuple[float, int]] = {}
    for gpu_sum, tenants in first.items():
        for tenant, index in tenants.items():
            if tenant not in memo_own:
                memo_own[tenant] = [t.points for t in _layer_terms([tenant], layers, weights)]
            score = _capped_score(gpu_sum, memo_own[tenant])
            best = worst.get(tenant)
            if best is None or score > best[0] or (score == best[0] and index < best[1]):
                worst[tenant] = (score, index)
    for tenant in sorted(worst):
        g, neighbours = order[worst[tenant][1]]
        risks.append(Risk("tenant", g.gpu_uuid, g.node, tenant, g.mode,
                          capped(_device_terms(g, tenant, neighbours, layers, weights))))
    return risks


LAYER_TERMS = frozenset(
    {"no_network_policy", "network_policy_not_collected", "no_dedicated_pool_or_vcluster", "dedicated_pool_not_collected"}
)
"""Terms of the tenant's own missing layers (the rest of a GPU row's terms belong to the GPU)."""


def _capped_score(first: float, points: list[float]) -> float:
    """The score of terms whose first points add up to ``first`` and whose last are ``points``, as
    ``Risk.score`` adds them up, left to right (a cap term past 100)."""
    total = sum(points, first)
    return total + (100 - total) if total > 100 else total


def _device_terms(
    g: _Gpu, tenant: str | None, neighbours: set[str], layers: _Tenancy, w: RiskWeights,
    memo: dict[tuple[str, ...], list[Term]] | None = None,
) -> list[Term]:
    """The terms of a GPU's row (``tenant`` None) or of a tenant's row on it; ``memo`` keeps the layer terms
    per set of subjects (many GPUs have the same tenants)."""
    others = [t for t in g.ordered if t != tenant] if tenant else list(g.ordered[1:])
    near = sorted(neighbours - g.tenants)
    terms = [Term("sharing_mode", w.mode_base(g.mode), f"sharing mode {g.mode}")]
    if others:
        terms.append(
            Term("gpu_cotenants", min(w.gpu_cotenant_max, w.per_gpu_cotenant * len(others)),
                 f"{len(others)} other tenant(s) on this GPU: {_names(others)}")
        )
    if near:
        terms.append(
            Term("node_cotenants", min(w.node_cotenant_max, w.per_node_cotenant * len(near)),
                 f"{len(near)} other tenant(s) on the node or NVLink domain: {_names(near)}")
        )
    if g.blind and len(g.tenants) > 0:
        terms.append(
            Term("telemetry_blind_spot", w.telemetry_blind_spot,
                 f"shared {g.mode} GPU without per-tenant activity attribution")
        )
    if g.faults and len(g.tenants) > 1:
        codes = ", ".join(str(c) for c in g.fault_codes)
        terms.append(
            Term("shared_faults", min(w.shared_fault_max, w.per_shared_fault * g.faults),
                 f"{g.faults} fault event(s) (XID {codes}) on a GPU shared by {len(g.tenants)} tenants")
        )
    subjects = (tenant,) if tenant else g.ordered
    if memo is None:
        return terms + _layer_terms(list(subjects), layers, w)
    if subjects not in memo:
        memo[subjects] = _layer_terms(list(subjects), layers, w)
    return terms + memo[subjects]


@dataclass(frozen=True)
class _Tenancy:
    """Every tenant's layers, indexed for the layer terms of many GPUs: the names the terms list
    (``tenant/namespace``) formatted once, tenants grouped by what they lack, so a GPU's terms come from
    set intersections with its tenants (no loop over them)."""

    without_policy: dict[str, tuple[str, ...]]
    not_collected: dict[str, tuple[str, ...]]
    exposed: frozenset[str]
    """Neither a dedicated pool nor a virtual cluster, as collected."""
    blind: frozenset[str]
    """No isolation layer known, and the inventory that would show one was not collected."""
    known: frozenset[str]

    @classmethod
    def of(cls, layers: dict[str, _Layers]) -> _Tenancy:
        return cls(
            {t: tuple(f"{t}/{ns}" for ns in la.namespaces_without_policy)
             for t, la in layers.items() if la.namespaces_without_policy},
            {t: tuple(f"{t}/{ns}" for ns in la.namespaces_not_collected)
             for t, la in layers.items() if la.namespaces_not_collected},
            frozenset(t for t, la in layers.items() if not la.isolated and la.pools_collected),
            frozenset(t for t, la in layers.items() if not la.isolated and not la.pools_collected),
            frozenset(layers),
        )


def _layer_terms(subjects: list[str], tenancy: _Tenancy, w: RiskWeights) -> list[Term]:
    """Missing tenancy layers of ``subjects`` (sorted), told apart from layers the inventory never collected.
    A tenant the inventory does not list has no known layer and was not collected."""
    terms = []
    no_policy = sorted(set(chain.from_iterable(map(tenancy.without_policy.__getitem__,
                                                   tenancy.without_policy.keys() & subjects))))
    if no_policy:
        terms.append(
            Term("no_network_policy", w.no_network_policy, f"no NetworkPolicy in namespace(s) {_names(no_policy)}")
        )
    elif unknown := sorted(set(chain.from_iterable(map(tenancy.not_collected.__getitem__,
                                                       tenancy.not_collected.keys() & subjects)))):
        terms.append(
            Term("network_policy_not_collected", w.no_network_policy,
                 f"NetworkPolicies not collected for namespace(s) {_names(unknown)}: {COLLECT_HINT}; "
                 "weighed as missing until known")
        )
    exposed = sorted(tenancy.exposed.intersection(subjects))
    if exposed:
        terms.append(
            Term("no_dedicated_pool_or_vcluster", w.no_dedicated_pool_or_vcluster,
                 f"neither a dedicated pool nor a virtual cluster: {_names(exposed)}")
        )
    elif blind := sorted(tenancy.blind.intersection(subjects).union(set(subjects).difference(tenancy.known))):
        terms.append(
            Term("dedicated_pool_not_collected", w.no_dedicated_pool_or_vcluster,
                 f"node pools and virtual clusters not collected for {_names(blind)}: {COLLECT_HINT}; "
                 "weighed as missing until known")
        )
    return terms


def _names(items: list[str], most: int = 5) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" (+{len(items) - most} more)" if len(items) > most else "")


def _gpus(con: duckdb.DuckDBPyConnection, window: Window, rules: HealthRules) -> dict[str, _Gpu]:
    tenants: dict[str, frozenset[str]] = {
        gpu: frozenset(held) for gpu, held in con.execute(
            "SELECT d.gpu_uuid, list(a.tenant) FROM an_alloc a JOIN an_dev d USING (device_id) GROUP BY ALL"
        ).fetchall()
    }
    faults: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for gpu, code, count in con.execute(
        """
        SELECT gpu_uuid, code, sum(count) FROM f_events
        WHERE kind = 'xid' AND code IS NOT NULL AND ts >= $start AND ts < $end GROUP BY ALL ORDER BY ALL
        """,
        {"start": window.start, "end": window.end},
    ).fetchall():
        faults[gpu].append((int(code), int(count)))
    rows = con.execute(
        """
        SELECT d.gpu_uuid, any_value(d.node),
               CASE WHEN bool_or(d.kind = 'mig') THEN 'mig' ELSE any_value(d.sharing_mode) END AS mode,
               any_value(n.nvlink_domain),
               bool_or(db.n > 0 AND db.n_activity = 0) AS unmeasured
        FROM an_dev d
        LEFT JOIN nodes n ON n.node = d.node
        LEFT JOIN (SELECT device_id, sum(n) AS n, sum(n_activity) AS n_activity FROM an_known GROUP BY ALL) db
               USING (device_id)
        GROUP BY d.gpu_uuid ORDER BY d.gpu_uuid
        """
    ).fetchall()
    out = {}
    for gpu, node, mode, domain, unmeasured in rows:
        mode = mode or "exclusive"
        blind = mode in ("time-slicing", "mps") or (mode == "mig" and bool(unmeasured))
        counted = [(c, n) for c, n in faults.get(gpu, []) if not (mode == "mig" and c in rules.application_xids)]
        held = tenants.get(gpu, frozenset())
        out[gpu] = _Gpu(
            gpu, node, mode, domain, blind, held, sum(n for _, n in counted), tuple(c for c, _ in counted),
            tuple(sorted(held)),
        )
    return out


def _layers(con: duckdb.DuckDBPyConnection, window: Window) -> dict[str, _Layers]:
    """Per tenant: namespaces (used in the window) without NetworkPolicy, or never collected; dedicated
    pool or vcluster, and whether the inventory that would show them was collected at all."""
    collected = con.execute(
        """
        SELECT EXISTS (SELECT 1 FROM f_namespace_snapshots WHERE ts < $end)
            OR EXISTS (SELECT 1 FROM ingest_batches WHERE source = 'kubernetes' AND window_start < $end)
        """,
        {"end": window.end},
    ).fetchone()
    inventory = bool(collected and collected[0])
    rows = con.execute(
        """
        WITH used AS (SELECT DISTINCT tenant, namespace FROM an_alloc),
        latest AS (
            SELECT namespace, arg_max(network_policies, ts) AS policies, arg_max(virtual_cluster, ts) AS vcluster,
                   true AS seen
            FROM f_namespace_snapshots WHERE ts < $end GROUP BY namespace
        ),
        placed AS (
            SELECT a.tenant, bool_and(n.dedicated_tenant IS NOT DISTINCT FROM a.tenant) AS on_own_nodes
            FROM (SELECT DISTINCT tenant, device_id FROM an_alloc) a
            JOIN an_dev d USING (device_id) LEFT JOIN nodes n ON n.node = d.node
            GROUP BY a.tenant
        )
        SELECT u.tenant,
               list(u.namespace ORDER BY u.namespace) FILTER (WHERE l.seen AND l.policies = 0),
               bool_or(l.vcluster IS NOT NULL) OR any_value(t.dedicated_pool) IS NOT NULL
                 OR any_value(t.virtual_cluster) IS NOT NULL OR any_value(p.on_own_nodes),
               list(u.namespace ORDER BY u.namespace) FILTER (WHERE l.seen IS NULL)
        FROM used u
        LEFT JOIN latest l USING (namespace)
        LEFT JOIN tenants t ON t.tenant = u.tenant
        LEFT JOIN placed p ON p.tenant = u.tenant
        GROUP BY u.tenant
        """,
        {"end": window.end},
    ).fetchall()
    return {t: _Layers(tuple(ns or ()), bool(iso), tuple(unseen or ()), inventory) for t, ns, iso, unseen in rows}


def insert_risk(con: duckdb.DuckDBPyConnection, run_id: str, window: Window, risks: list[Risk]) -> None:
    """Write the device and tenant rows of this run."""
    if not risks:
        return
    cols: dict[str, list[object]] = {c: [] for c in column_names("isolation_risk")}
    for r in risks:
        terms = json.dumps([{"term": t.term, "points": t.points, "reason": t.reason} for t in r.terms])
        values = (run_id, window.start, window.end, r.scope, r.gpu_uuid, r.node, r.tenant, r.sharing_mode,
                  r.score, terms)
        for name, value in zip(cols, values, strict=True):
            cols[name].append(value)
    append_columns(con, "isolation_risk", cols)
