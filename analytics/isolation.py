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
import math
from collections import defaultdict
from dataclasses import dataclass
from itertools import chain
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]

import duckdb

from analytics.facts import Window
from analytics.result_tables import append_columns, column_names
from analytics.settings import HealthRules, RiskWeights


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
    tenants: int
    """The tenants that held it in the window, as bits (bit ``i``: the ``i``-th of ``_Tenancy.names``)."""
    faults: int
    fault_codes: tuple[int, ...]


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
    names = _tenant_names(con)
    gpus = _gpus(con, window, health_rules, names)
    tenancy = _Tenancy.of(names, _layers(con, window))
    by_place: dict[str, int] = defaultdict(int)
    for g in gpus:
        by_place[f"node:{g.node}"] |= g.tenants
        if g.domain:
            by_place[f"nvlink:{g.domain}"] |= g.tenants
    near: dict[tuple[str, str | None], int] = {}  # the same for every GPU of a node
    risks: list[Risk] = []
    # A tenant's row is its worst GPU: the first GPU (in order) of highest score. A GPU's own terms are
    # the same for each of its tenants and a tenant's layer terms the same on each of its GPUs, so a
    # score depends only on the GPU's points summed (in the terms' order) and on the tenant: the same
    # float sums as the rows. Per distinct GPU sum, the first GPU of each tenant is kept (bit operations,
    # no loop over GPU x tenant pairs); per tenant, its highest score over those sums wins, the earliest
    # GPU among equal scores, and only the winner's terms are written out.
    order: list[tuple[_Gpu, int]] = []
    first: dict[float, dict[int, int]] = defaultdict(dict)  # GPU sum -> tenant -> its first GPU with it
    seen_by_sum: dict[float, int] = defaultdict(int)  # GPU sum -> the tenants in ``first[sum]``
    memo: dict[int, list[Term]] = {}
    modes: dict[str, Term] = {}
    for g in gpus:
        place = (g.node, g.domain)
        if place not in near:
            near[place] = by_place[f"node:{g.node}"] | (by_place[f"nvlink:{g.domain}"] if g.domain else 0)
        neighbours = near[place]
        held = g.tenants
        own = _gpu_terms(g, held & (held - 1), neighbours, tenancy.names, weights, modes)
        if held not in memo:
            memo[held] = _layer_terms(held, tenancy, weights)
        risks.append(Risk("device", g.gpu_uuid, g.node, None, g.mode, capped(own + memo[held])))
        if not held:
            continue
        # the GPU's own points: its row's terms less the layer terms (the same for each of its tenants)
        gpu_sum = sum(t.points for t in own)
        new = held & ~seen_by_sum[gpu_sum]
        if new:
            seen_by_sum[gpu_sum] |= new
            first[gpu_sum].update(dict.fromkeys(_codes(new), len(order)))
        order.append((g, neighbours))
    worst: dict[int, tuple[float, int]] = {}
    own_points: dict[int, list[float]] = {}  # a tenant's own layer points
    for gpu_sum, tenants in first.items():
        for tenant, index in tenants.items():
            if tenant not in own_points:
                own_points[tenant] = [t.points for t in _layer_terms(1 << tenant, tenancy, weights)]
            score = _capped_score(gpu_sum, own_points[tenant])
            best = worst.get(tenant)
            if best is None or score > best[0] or (score == best[0] and index < best[1]):
                worst[tenant] = (score, index)
    for tenant in sorted(worst):
        g, neighbours = order[worst[tenant][1]]
        name, bit = tenancy.names[tenant], 1 << tenant
        # an empty tenant name reads as no tenant: the row of the GPU as a whole (as it always has)
        subjects, others = (bit, g.tenants & ~bit) if name else (g.tenants, g.tenants & (g.tenants - 1))
        own = _gpu_terms(g, others, neighbours, tenancy.names, weights, modes)
        risks.append(Risk("tenant", g.gpu_uuid, g.node, name, g.mode,
                          capped(own + _layer_terms(subjects, tenancy, weights))))
    return risks


def _capped_score(first: float, points: list[float]) -> float:
    """The score of terms whose first points add up to ``first`` and whose last are ``points``, as
    ``Risk.score`` adds them up, left to right (a cap term past 100)."""
    total = sum(points, first)
    return total + (100 - total) if total > 100 else total


def _gpu_terms(
    g: _Gpu, others: int, neighbours: int, names: tuple[str, ...], w: RiskWeights, modes: dict[str, Term]
) -> list[Term]:
    """The terms of a GPU's row that belong to the GPU (the layer terms follow them): ``others`` are the
    co-tenants the row names, ``neighbours`` every tenant on its node or NVLink domain; ``modes`` keeps
    the sharing-mode term per mode."""
    if g.mode not in modes:
        modes[g.mode] = Term("sharing_mode", w.mode_base(g.mode), f"sharing mode {g.mode}")
    terms = [modes[g.mode]]
    if others:
        count = others.bit_count()
        terms.append(
            Term("gpu_cotenants", min(w.gpu_cotenant_max, w.per_gpu_cotenant * count),
                 f"{count} other tenant(s) on this GPU: {_named(others, names)}")
        )
    if near := neighbours & ~g.tenants:
        count = near.bit_count()
        terms.append(
            Term("node_cotenants", min(w.node_cotenant_max, w.per_node_cotenant * count),
                 f"{count} other tenant(s) on the node or NVLink domain: {_named(near, names)}")
        )
    if g.blind and g.tenants:
        terms.append(
            Term("telemetry_blind_spot", w.telemetry_blind_spot,
                 f"shared {g.mode} GPU without per-tenant activity attribution")
        )
    if g.faults and g.tenants & (g.tenants - 1):  # shared by several tenants
        codes = ", ".join(str(c) for c in g.fault_codes)
        terms.append(
            Term("shared_faults", min(w.shared_fault_max, w.per_shared_fault * g.faults),
                 f"{g.faults} fault event(s) (XID {codes}) on a GPU shared by {g.tenants.bit_count()} tenants")
        )
    return terms


@dataclass(frozen=True)
class _Tenancy:
    """Every tenant's layers, indexed for the layer terms of many GPUs: tenants numbered in the order of
    their names, a set of tenants held as the bits of an int (a GPU's, those lacking a layer), so a GPU's
    terms come from bitwise ands and the names of the first few bits (no loop over its tenants)."""

    names: tuple[str, ...]
    """Every tenant that held a device in the window, sorted: bit ``i`` of a set is ``names[i]``."""
    without_policy: _Named
    """Namespaces (``tenant/namespace``) without a NetworkPolicy, per tenant."""
    not_collected: _Named
    """Namespaces the inventory never saw, per tenant."""
    exposed: int
    """Neither a dedicated pool nor a virtual cluster, as collected."""
    blind: int
    """No isolation layer known, and the inventory that would show one was not collected; or no layers listed."""

    @classmethod
    def of(cls, names: tuple[str, ...], layers: dict[str, _Layers]) -> _Tenancy:
        code = {t: i for i, t in enumerate(names)}
        bits = lambda tenants: sum(1 << code[t] for t in tenants)  # noqa: E731
        return cls(
            names,
            _Named.of(names, {t: la.namespaces_without_policy for t, la in layers.items()}),
            _Named.of(names, {t: la.namespaces_not_collected for t, la in layers.items()}),
            bits(t for t, la in layers.items() if not la.isolated and la.pools_collected),
            bits(t for t, la in layers.items() if not la.isolated and not la.pools_collected)
            | bits(t for t in names if t not in layers),
        )


@dataclass(frozen=True)
class _Named:
    """Per tenant, the names (``tenant/namespace``) a layer term lists, for sets of tenants given as bits."""

    names: tuple[tuple[str, ...], ...]
    """Per tenant number, its names, sorted."""
    has: int
    """The tenants with at least one name."""
    several: int
    """The tenants with more than one name."""
    in_order: bool
    """Whether every tenant's names, one tenant after the other in tenant order, are strictly increasing:
    then the names of any set of tenants, taken tenant by tenant, are already sorted and distinct."""

    @classmethod
    def of(cls, tenants: tuple[str, ...], namespaces: dict[str, tuple[str, ...]]) -> _Named:
        names = tuple(tuple(sorted({f"{t}/{ns}" for ns in namespaces.get(t, ())})) for t in tenants)
        listed = list(chain.from_iterable(names))
        return cls(
            names,
            sum(1 << i for i, own in enumerate(names) if own),
            sum(1 << i for i, own in enumerate(names) if len(own) > 1),
            all(a < b for a, b in zip(listed, listed[1:], strict=False)),
        )

    def text(self, tenants: int, most: int = 5) -> str:
        """``_names`` of the sorted distinct names of ``tenants`` (bits; each has a name)."""
        if not self.in_order:
            return _names(sorted(set(chain.from_iterable(self.names[i] for i in _codes(tenants)))), most)
        total = tenants.bit_count() + sum(len(self.names[i]) - 1 for i in _codes(tenants & self.several))
        shown: list[str] = []
        rest = tenants
        while rest and len(shown) < most:
            low = rest & -rest
            shown.extend(self.names[low.bit_length() - 1][: most - len(shown)])
            rest ^= low
        return ", ".join(shown) + (f" (+{total - most} more)" if total > most else "")


def _layer_terms(subjects: int, tenancy: _Tenancy, w: RiskWeights) -> list[Term]:
    """Missing tenancy layers of ``subjects`` (bits), told apart from layers the inventory never collected.
    A tenant the inventory does not list has no known layer and was not collected."""
    terms = []
    if no_policy := subjects & tenancy.without_policy.has:
        terms.append(
            Term("no_network_policy", w.no_network_policy,
                 f"no NetworkPolicy in namespace(s) {tenancy.without_policy.text(no_policy)}")
        )
    elif unknown := subjects & tenancy.not_collected.has:
        terms.append(
            Term("network_policy_not_collected", w.no_network_policy,
                 f"NetworkPolicies not collected for namespace(s) {tenancy.not_collected.text(unknown)}: "
                 f"{COLLECT_HINT}; weighed as missing until known")
        )
    if exposed := subjects & tenancy.exposed:
        terms.append(
            Term("no_dedicated_pool_or_vcluster", w.no_dedicated_pool_or_vcluster,
                 f"neither a dedicated pool nor a virtual cluster: {_named(exposed, tenancy.names)}")
        )
    elif blind := subjects & tenancy.blind:
        terms.append(
            Term("dedicated_pool_not_collected", w.no_dedicated_pool_or_vcluster,
                 f"node pools and virtual clusters not collected for {_named(blind, tenancy.names)}: "
                 f"{COLLECT_HINT}; weighed as missing until known")
        )
    return terms


def _codes(bits: int) -> list[int]:
    """The numbers of the set bits, lowest first."""
    out = []
    while bits:
        low = bits & -bits
        out.append(low.bit_length() - 1)
        bits ^= low
    return out


def _named(tenants: int, names: tuple[str, ...], most: int = 5) -> str:
    """``_names`` of the tenants in ``tenants`` (bits), looking only at the first ``most``."""
    shown: list[str] = []
    rest = tenants
    while rest and len(shown) < most:
        low = rest & -rest
        shown.append(names[low.bit_length() - 1])
        rest ^= low
    total = tenants.bit_count()
    return ", ".join(shown) + (f" (+{total - most} more)" if total > most else "")


def _names(items: list[str], most: int = 5) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" (+{len(items) - most} more)" if len(items) > most else "")


def _tenant_names(con: duckdb.DuckDBPyConnection) -> tuple[str, ...]:
    """Every tenant that held a device in the window, sorted (the numbering of tenant bits)."""
    return tuple(sorted(t for (t,) in con.execute("SELECT DISTINCT tenant FROM an_alloc").fetchall()))


BITSTRING_MOST = 1024
"""Up to this many tenants, a GPU's tenants are read as one bit string (a character per tenant of the window);
beyond, as the list of their numbers (184,000 GPU-tenant pairs over 8,000 GPUs, read and turned into ints: bit
strings 0.02 s for 40 tenants and 0.7 s for 20,000, lists 0.07 s and 0.3 s)."""


def _tenant_bits(
    con: duckdb.DuckDBPyConnection, names: tuple[str, ...], bitstring_most: int = BITSTRING_MOST
) -> dict[str, int]:
    """Per GPU, the tenants that held it as bits of ``names``."""
    if not names:
        return {}
    tenants = "FROM an_alloc a JOIN an_dev d USING (device_id) JOIN " \
        "(SELECT unnest($names) AS tenant, generate_subscripts($names, 1) - 1 AS code) c USING (tenant) GROUP BY ALL"
    if len(names) <= bitstring_most:  # '1' at position i: names[i] held it
        return {gpu: int(held[::-1], 2) for gpu, held in con.execute(
            f"SELECT d.gpu_uuid, bitstring_agg(c.code, 0, $last)::VARCHAR {tenants}",  # noqa: S608 - constant
            {"names": list(names), "last": len(names) - 1},
        ).fetchall()}
    return {gpu: sum(1 << code for code in held) for gpu, held in con.execute(
        f"SELECT d.gpu_uuid, list(DISTINCT c.code) {tenants}", {"names": list(names)}  # noqa: S608 - constant
    ).fetchall()}


def _gpus(
    con: duckdb.DuckDBPyConnection, window: Window, rules: HealthRules, names: tuple[str, ...]
) -> list[_Gpu]:
    """Every GPU of the inventory, in order of its UUID, with the tenants that held it as bits of ``names``."""
    tenants = _tenant_bits(con, names)
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
    out = []
    for gpu, node, mode, domain, unmeasured in rows:
        mode = mode or "exclusive"
        blind = mode in ("time-slicing", "mps") or (mode == "mig" and bool(unmeasured))
        counted = [(c, n) for c, n in faults[gpu] if not (mode == "mig" and c in rules.application_xids)] \
            if gpu in faults else []
        out.append(_Gpu(gpu, node, mode, domain, blind, tenants.get(gpu, 0), sum(n for _, n in counted),
                        tuple(c for c, _ in counted)))
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
    fragments: dict[int, str] = {}  # a term's JSON by the term's id (rows share terms; ``risks`` keeps them alive)
    terms: list[object] = [
        "[" + ", ".join([fragments.get(id(t)) or fragments.setdefault(id(t), _term_json(t)) for t in r.terms]) + "]"
        for r in risks
    ]
    n = len(risks)
    constant: list[list[object]] = [[run_id] * n, [window.start] * n, [window.end] * n]
    columns: list[list[object]] = [
        *constant, [r.scope for r in risks], [r.gpu_uuid for r in risks], [r.node for r in risks],
        [r.tenant for r in risks], [r.sharing_mode for r in risks], [r.score for r in risks], terms,
    ]
    append_columns(con, "isolation_risk", dict(zip(column_names("isolation_risk"), columns, strict=True)))


def _term_json(t: Term) -> str:
    """``json.dumps({"term": t.term, "points": t.points, "reason": t.reason})``, the same text, built directly."""
    return (f'{{"term": {encode_basestring_ascii(t.term)}, "points": {_json_number(t.points)}, '
            f'"reason": {encode_basestring_ascii(t.reason)}}}')


def _json_number(x: float) -> str:
    """``json.dumps(x)``: an int's or a finite float's repr, the rest (NaN, infinities, subclasses) as json says."""
    if type(x) is int or (type(x) is float and math.isfinite(x)):
        return repr(x)
    return json.dumps(x)
