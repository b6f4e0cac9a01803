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
from analytics.result_tables import append_columns, column_names, insert_columns
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


@dataclass(frozen=True)
class RiskRows:
    """A window's isolation-risk rows: the device row of each kind of GPU (``an_risk_kinds``; :func:`insert_risk`
    writes every GPU's row from its kind's) and the tenant rows."""

    kinds: list[Risk]
    """The device row of each kind, in the order of the kinds' numbers (``gpu_uuid``, ``node``: its first GPU)."""
    tenants: list[Risk]
    """One row per tenant that held a device, sorted by tenant."""


def capped(terms: list[Term]) -> tuple[Term, ...]:
    """Append a ``cap`` term when the points pass 100, so the listed terms still sum to the score."""
    total = sum(t.points for t in terms)
    if total > 100:
        terms = [*terms, Term("cap", 100 - total, f"sum of {total:g} points capped at 100")]
    return tuple(terms)


@dataclass(frozen=True)
class _Gpu:
    """A kind of GPU: what its terms depend on (every GPU of the kind has the same), and its first GPU."""

    gpu_uuid: str
    node: str
    mode: str
    blind: bool
    tenants: int
    """The tenants that held it in the window, as bits (bit ``i``: the ``i``-th of ``_Tenancy.names``)."""
    faults: int
    fault_codes: str
    """The XID codes of its counted faults, ascending, as a reason lists them."""


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
) -> RiskRows:
    """Device rows for every GPU in the inventory, tenant rows for every tenant that held a device.

    A GPU's row depends only on its kind: its sharing mode, whether its use is attributed, its tenants, its
    counted faults and the tenants of its node and NVLink domain (``an_risk_kinds``). The terms are built once
    per kind, in the order of each kind's first GPU, and every GPU's row is written from its kind."""
    names = _tenant_names(con)
    _held_keys(con, names)
    con.execute(_RISK_GPUS, {"start": window.start, "end": window.end,
                             "application_xids": sorted(health_rules.application_xids)})
    bits = _HeldBits()
    place_bits = _places(con, bits, names)
    kinds = [
        (_Gpu(gpu, node, mode, bool(blind), bits(held), int(faults), codes), place_bits[place])
        for gpu, node, mode, blind, held, faults, codes, place in con.execute(_RISK_KINDS).execute(
            "SELECT first_gpu, first_node, mode, blind, held, faults, codes, place FROM an_risk_kinds ORDER BY kind"
        ).fetchall()
    ]
    tenancy = _Tenancy.of(names, _layers(con, window))
    device_rows: list[Risk] = []
    # A tenant's row is its worst GPU: the first GPU (in order) of highest score. A GPU's own terms are
    # the same for each of its tenants and a tenant's layer terms the same on each of its GPUs, so a
    # score depends only on the GPU's points summed (in the terms' order) and on the tenant: the same
    # float sums as the rows. Per distinct GPU sum, the first kind of each tenant is kept (bit operations,
    # no loop over GPU x tenant pairs; kinds are in order of their first GPU); per tenant, its highest score
    # over those sums wins, the earliest GPU among equal scores, and only the winner's terms are written out.
    first: dict[float, dict[int, int]] = defaultdict(dict)  # GPU sum -> tenant -> its first kind with it
    seen_by_sum: dict[float, int] = defaultdict(int)  # GPU sum -> the tenants in ``first[sum]``
    memo: dict[int, list[Term]] = {}
    modes: dict[str, Term] = {}
    for index, (g, neighbours) in enumerate(kinds):
        held = g.tenants
        own = _gpu_terms(g, held & (held - 1), neighbours, tenancy.names, weights, modes)
        if held not in memo:
            memo[held] = _layer_terms(held, tenancy, weights)
        device_rows.append(Risk("device", g.gpu_uuid, g.node, None, g.mode, capped(own + memo[held])))
        if not held:
            continue
        # the GPU's own points: its row's terms less the layer terms (the same for each of its tenants)
        gpu_sum = sum(t.points for t in own)
        new = held & ~seen_by_sum[gpu_sum]
        if new:
            seen_by_sum[gpu_sum] |= new
            first[gpu_sum].update(dict.fromkeys(_codes(new), index))
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
    tenant_rows: list[Risk] = []
    for tenant in sorted(worst):
        g, neighbours = kinds[worst[tenant][1]]
        name, bit = tenancy.names[tenant], 1 << tenant
        # an empty tenant name reads as no tenant: the row of the GPU as a whole (as it always has)
        subjects, others = (bit, g.tenants & ~bit) if name else (g.tenants, g.tenants & (g.tenants - 1))
        own = _gpu_terms(g, others, neighbours, tenancy.names, weights, modes)
        tenant_rows.append(Risk("tenant", g.gpu_uuid, g.node, name, g.mode,
                                capped(own + _layer_terms(subjects, tenancy, weights))))
    _kind_rows(con, device_rows)
    return RiskRows(device_rows, tenant_rows)


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
        terms.append(
            Term("shared_faults", min(w.shared_fault_max, w.per_shared_fault * g.faults),
                 f"{g.faults} fault event(s) (XID {g.fault_codes}) on a GPU shared by {g.tenants.bit_count()} tenants")
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


def _held_keys(con: duckdb.DuckDBPyConnection, names: tuple[str, ...], bitstring_most: int = BITSTRING_MOST) -> None:
    """``an_risk_pairs``: each GPU of the inventory with each tenant that held one of its devices, and the tenant's
    number; ``an_risk_held``: per GPU that a tenant held, its tenants as a key :class:`_HeldBits` reads (a bit
    string, '1' at position ``i`` when ``names[i]`` held it, or the list of their numbers)."""
    con.execute("CREATE OR REPLACE TEMP TABLE an_risk_pairs (gpu_uuid VARCHAR, tenant VARCHAR, code BIGINT)")
    con.execute("CREATE OR REPLACE TEMP TABLE an_risk_held (gpu_uuid VARCHAR, held VARCHAR)")
    if not names:
        return
    con.execute(
        "INSERT INTO an_risk_pairs SELECT DISTINCT d.gpu_uuid, a.tenant, c.code "
        "FROM an_alloc a JOIN an_dev d USING (device_id) JOIN "
        "(SELECT unnest($names) AS tenant, generate_subscripts($names, 1) - 1 AS code) c USING (tenant)",
        {"names": list(names)},
    )
    con.execute(f"INSERT INTO an_risk_held SELECT gpu_uuid, {_key(names, bitstring_most)} FROM an_risk_pairs "  # noqa: S608
                "GROUP BY gpu_uuid", _key_parameters(names, bitstring_most))


def _key(names: tuple[str, ...], bitstring_most: int) -> str:
    """The aggregate of ``code`` that gives a set of tenants' key (``_held_keys``)."""
    return "bitstring_agg(code, 0, $last)::VARCHAR" if len(names) <= bitstring_most \
        else "list(DISTINCT code ORDER BY code)::VARCHAR"


def _key_parameters(names: tuple[str, ...], bitstring_most: int) -> dict[str, object]:
    return {"last": len(names) - 1} if len(names) <= bitstring_most else {}


class _HeldBits:
    """A ``held`` key of ``an_risk_held`` as the bits of an int, each distinct key converted once."""

    def __init__(self) -> None:
        self._memo: dict[str, int] = {"": 0}

    def __call__(self, key: str) -> int:
        bits = self._memo.get(key)
        if bits is None:
            bits = self._memo[key] = sum(1 << int(c) for c in key[1:-1].split(", ")) if key.startswith("[") \
                else int(key[::-1], 2)
        return bits


def _tenant_bits(
    con: duckdb.DuckDBPyConnection, names: tuple[str, ...], bitstring_most: int = BITSTRING_MOST
) -> dict[str, int]:
    """Per GPU, the tenants that held it as bits of ``names``."""
    _held_keys(con, names, bitstring_most)
    bits = _HeldBits()
    return {gpu: bits(held) for gpu, held in con.execute("SELECT gpu_uuid, held FROM an_risk_held").fetchall()}


_RISK_GPUS = """
CREATE OR REPLACE TEMP TABLE an_risk_gpus AS
WITH gpus AS (
    SELECT d.gpu_uuid, any_value(d.node) AS node,
           coalesce(CASE WHEN bool_or(d.kind = 'mig') THEN 'mig' ELSE any_value(d.sharing_mode) END, 'exclusive')
             AS mode,
           coalesce(bool_or(db.n > 0 AND db.n_activity = 0), false) AS unmeasured
    FROM an_dev d
    LEFT JOIN (SELECT device_id, sum(n) AS n, sum(n_activity) AS n_activity FROM an_known GROUP BY ALL) db
           USING (device_id)
    GROUP BY d.gpu_uuid
),
faults AS (
    SELECT e.gpu_uuid, sum(e.n)::BIGINT AS faults, string_agg(e.code::VARCHAR, ', ' ORDER BY e.code) AS codes
    FROM (SELECT gpu_uuid, code, sum(count) AS n FROM f_events
          WHERE kind = 'xid' AND code IS NOT NULL AND ts >= $start AND ts < $end GROUP BY ALL) e
    JOIN gpus g USING (gpu_uuid)
    WHERE NOT (g.mode = 'mig' AND list_contains($application_xids, e.code))
    GROUP BY e.gpu_uuid
)
SELECT g.gpu_uuid, g.node, g.mode,
       g.mode IN ('time-slicing', 'mps') OR (g.mode = 'mig' AND g.unmeasured) AS blind,
       coalesce(h.held, '') AS held, coalesce(f.faults, 0) AS faults, coalesce(f.codes, '') AS codes,
       n.nvlink_domain AS domain
FROM gpus g
LEFT JOIN an_risk_held h USING (gpu_uuid)
LEFT JOIN faults f USING (gpu_uuid)
LEFT JOIN nodes n ON n.node = g.node
"""
"""Per GPU of the inventory: its node, sharing mode, whether its use is unattributed (time-slicing, MPS, or MIG
without activity), its tenants (``held``, '' for none), its faults counted (a MIG GPU's application XIDs are
its tenants' own) with their codes, and its node's NVLink domain."""


def _places(con: duckdb.DuckDBPyConnection, bits: _HeldBits, names: tuple[str, ...]) -> list[int]:
    """``an_risk_places``: per node, its place (a number): the tenants on the node or its NVLink domain, which
    the returned list gives per place as bits."""
    on_node: dict[str | None, tuple[str | None, int]] = {
        node: (domain, 0) for node, domain in con.execute(
            "SELECT node, any_value(domain) FROM an_risk_gpus GROUP BY node").fetchall()}
    if names:
        for node, held in con.execute(
            f"SELECT node, {_key(names, BITSTRING_MOST)} FROM "  # noqa: S608 - constant
            "(SELECT DISTINCT g.node, p.code FROM an_risk_pairs p JOIN an_risk_gpus g USING (gpu_uuid)) GROUP BY node",
            _key_parameters(names, BITSTRING_MOST),
        ).fetchall():
            on_node[node] = (on_node[node][0], bits(held))
    on_domain: dict[str, int] = defaultdict(int)
    for domain, tenants in on_node.values():
        if domain:
            on_domain[domain] |= tenants
    numbers: dict[int, int] = {}
    nodes = list(on_node)
    place = [numbers.setdefault(t | on_domain[d] if d else t, len(numbers)) for d, t in on_node.values()]
    con.execute("CREATE OR REPLACE TEMP TABLE an_risk_places (node VARCHAR, place INTEGER)")
    insert_columns(con, "an_risk_places", {"node": nodes, "place": place})
    return list(numbers)


_RISK_KINDS = """
CREATE OR REPLACE TEMP TABLE an_risk_kinds AS
SELECT row_number() OVER (ORDER BY first_gpu) - 1 AS kind, *
FROM (SELECT p.place, g.mode, g.blind, g.held, g.faults, g.codes,
             min(g.gpu_uuid) AS first_gpu, arg_min(g.node, g.gpu_uuid) AS first_node,
             list({'gpu_uuid': g.gpu_uuid, 'node': g.node}) AS gpus
      FROM an_risk_gpus g JOIN an_risk_places p ON p.node IS NOT DISTINCT FROM g.node
      GROUP BY ALL)
"""
"""The kinds of GPU (what a device row depends on), numbered in order of each kind's first GPU, each with its GPUs
(their device rows are the kind's: written from this list, not by joining a million GPUs back on the kind's key)."""


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
            SELECT p.tenant, bool_and(n.dedicated_tenant IS NOT DISTINCT FROM p.tenant) AS on_own_nodes
            FROM an_risk_pairs p JOIN an_risk_gpus g USING (gpu_uuid) LEFT JOIN nodes n ON n.node = g.node
            GROUP BY p.tenant
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


def _kind_rows(con: duckdb.DuckDBPyConnection, kinds: list[Risk]) -> None:
    """``an_risk_kind_rows``: each kind's score and terms' JSON, built while the window's other work goes on (a
    merge copies workers' rows beside it), so the run's transaction only writes them out per GPU."""
    fragments: dict[int, str] = {}  # a term's JSON by the term's id (kinds share terms; ``kinds`` keeps them alive)
    con.execute("CREATE OR REPLACE TEMP TABLE an_risk_kind_rows (kind INTEGER, score DOUBLE, terms JSON)")
    insert_columns(con, "an_risk_kind_rows", {"kind": list(range(len(kinds))), "score": [r.score for r in kinds],
                                              "terms": [_terms_json(r, fragments) for r in kinds]})


def _terms_json(r: Risk, fragments: dict[int, str]) -> str:
    """The JSON of a row's terms (``fragments`` keeps each term's text by the term's id)."""
    return "[" + ", ".join([fragments.get(id(t)) or fragments.setdefault(id(t), _term_json(t)) for t in r.terms]) + "]"


def insert_risk(con: duckdb.DuckDBPyConnection, run_id: str, window: Window, risks: RiskRows) -> None:
    """Write the device rows of this run (every GPU's from its kind's row, ``an_risk_kind_rows``) and its tenant rows."""
    if risks.kinds:
        con.execute(
            f"""
            INSERT INTO isolation_risk ({", ".join(column_names("isolation_risk"))})
            SELECT $run, $start, $end, 'device', x.g.gpu_uuid, x.g.node, NULL, x.mode, x.score, x.terms
            FROM (SELECT unnest(k.gpus) AS g, k.mode, r.score, r.terms
                  FROM an_risk_kinds k JOIN an_risk_kind_rows r USING (kind)) x
            """,  # noqa: S608 - constant names
            {"run": run_id, "start": window.start, "end": window.end},
        )
    if not risks.tenants:
        return
    n = len(risks.tenants)
    rows = risks.tenants
    fragments: dict[int, str] = {}
    columns: list[list[object]] = [
        [run_id] * n, [window.start] * n, [window.end] * n, [r.scope for r in rows], [r.gpu_uuid for r in rows],
        [r.node for r in rows], [r.tenant for r in rows], [r.sharing_mode for r in rows], [r.score for r in rows],
        [_terms_json(r, fragments) for r in rows],
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
