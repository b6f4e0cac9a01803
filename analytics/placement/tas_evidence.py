"""Evidence for the Kueue TAS advice, read from the store: the newest analysis run's placements, queues, labels.

* **Placements**: the ``placement`` rows of the newest analysis run (one per workload and level).
* **Queue** of a workload: the Kueue LocalQueue its pods named (``pod_snapshots.queue``) mapped to its
  ClusterQueue (``quota_snapshots`` LocalQueue rows); else the tenant's only ClusterQueue; else the
  LocalQueue itself; else the tenant (``Tenant`` rows: no queue object is known).
* **Labels**: per level, the first label of the run's topology settings that a node carries
  (``kubernetes.io/hostname`` for ``node``).
* **Consolidation**: at the newest allocation sample of the run's window, which GPUs each workload
  spread wider than needed at ``block`` (else ``rack``) holds in each domain, who else holds GPUs there,
  and how many GPUs of its models are free in the domain it would move into.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import duckdb

from analytics.placement.settings import TopologySettings
from analytics.placement.spread import place_keys
from analytics.placement.tas_advice import (
    HOSTNAME_LABEL,
    Consolidation,
    LevelFigures,
    QueueAdvice,
    TasSettings,
    WorkloadSpread,
    advise_queue,
)

Queue = tuple[str, str, str]


@dataclass(frozen=True)
class TasEvidence:
    """What the advice was decided from: the analysis run and its window."""

    run_id: str
    window_start: datetime
    window_end: datetime
    advice: tuple[QueueAdvice, ...]


def _tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}


def _labels(text: object) -> dict[str, str]:
    try:
        value = json.loads(str(text)) if text else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def level_labels(node_labels: dict[str, dict[str, str]], settings: TopologySettings) -> dict[str, str | None]:
    """Per level, the node label the fleet uses for it (the first configured one any node carries)."""
    present = {k for labels in node_labels.values() for k, v in labels.items() if v}
    out: dict[str, str | None] = {"node": HOSTNAME_LABEL}
    for level, keys in settings.level_labels().items():
        out[level] = next((k for k in keys if k in present), None)
    return out


def node_domains(node_labels: dict[str, dict[str, str]], settings: TopologySettings) -> dict[str, dict[str, str | None]]:
    """Per node, its domain key at node, rack, block and zone (the same keys as the ``placement`` table)."""
    out = {}
    for node, labels in node_labels.items():
        named = {lvl: next((labels[k] for k in keys if labels.get(k)), None)
                 for lvl, keys in settings.level_labels().items()}
        out[node] = place_keys(node, None, None, named)
    return out


def load_tas_advice(con: duckdb.DuckDBPyConnection, settings: TasSettings) -> TasEvidence | None:
    """The advice per queue from the newest analysis run; None when no run has placement rows."""
    if not {"analysis_runs", "placement"} <= _tables(con):
        return None
    run = con.execute(
        "SELECT run_id, window_start, window_end, parameters FROM analysis_runs "
        "WHERE run_id IN (SELECT run_id FROM placement) ORDER BY created_at DESC LIMIT 1"
    ).fetchone()
    if run is None:
        return None
    run_id, start, end, params = run
    topo = TopologySettings.model_validate((json.loads(params) if params else {}).get("topology") or {})
    nodes = {str(n): _labels(lab) for n, lab in con.execute("SELECT node, labels FROM nodes").fetchall()}
    labels = level_labels(nodes, topo)
    workloads = _workloads(con, run_id)
    queues = _queues(con, start, end, workloads)
    consolidations = _consolidations(con, start, end, workloads.values(), node_domains(nodes, topo))
    grouped: dict[Queue, list[WorkloadSpread]] = defaultdict(list)
    tenants: dict[Queue, str] = {}
    for key, w in workloads.items():
        q = queues[key]
        grouped[q].append(w)
        tenants.setdefault(q, w.tenant)
    advice = tuple(
        advise_queue(q, tenants[q], ws, labels, settings, [c for w in ws for c in consolidations.get(w.ref, ())])
        for q, ws in sorted(grouped.items())
    )
    return TasEvidence(str(run_id), start, end, advice)


def _workloads(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[tuple[str, str, str], WorkloadSpread]:
    rows = con.execute(
        """
        SELECT tenant, namespace, workload_kind, workload, gpu_model, pods, devices, ge_hours, level,
               domains_spanned, min_domains, ge_hours_affected, domains
        FROM placement WHERE run_id = ? ORDER BY namespace, workload_kind, workload, level
        """,
        [run_id],
    ).fetchall()
    levels: dict[tuple[str, str, str], dict[str, LevelFigures]] = defaultdict(dict)
    head: dict[tuple[str, str, str], tuple[str, str, int, int, float]] = {}
    for tenant, ns, kind, name, model, pods, devices, ge_h, level, spanned, least, affected, domains in rows:
        key = (str(ns), str(kind), str(name))
        head[key] = (str(tenant), str(model), int(pods), int(devices), float(ge_h))
        levels[key][str(level)] = LevelFigures(int(spanned), int(least), float(affected), tuple(domains or ()))
    return {
        key: WorkloadSpread(t, key[0], key[1], key[2], model, pods, devices, ge_h, levels[key])
        for key, (t, model, pods, devices, ge_h) in head.items()
    }


def _queues(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime,
            workloads: dict[tuple[str, str, str], WorkloadSpread]) -> dict[tuple[str, str, str], Queue]:
    """Queue of each workload (see the module docstring for the order)."""
    tables = _tables(con)
    named: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    if "pod_snapshots" in tables:
        for ns, kind, name, queue, n in con.execute(
            """
            SELECT namespace, workload_kind, workload_name, queue, count(*) FROM pod_snapshots
            WHERE ts >= ? AND ts < ? AND queue IS NOT NULL AND queue <> '' GROUP BY ALL
            """,
            [start, end],
        ).fetchall():
            named[(str(ns), str(kind), str(name))][str(queue)] += int(n)
    lq_cq: dict[tuple[str, str], str] = {}
    tenant_cqs: dict[str, set[str]] = defaultdict(set)
    if "quota_snapshots" in tables:
        for kind, ns, name, tenant, cq in con.execute(
            """
            SELECT DISTINCT object_kind, object_namespace, object_name, tenant,
                   json_extract_string(annotations, '$.clusterQueue')
            FROM quota_snapshots WHERE object_kind IN ('ClusterQueue', 'LocalQueue')
            """
        ).fetchall():
            if kind == "LocalQueue" and cq:
                lq_cq[(str(ns), str(name))] = str(cq)
            elif kind == "ClusterQueue" and tenant:
                tenant_cqs[str(tenant)].add(str(name))
    out: dict[tuple[str, str, str], Queue] = {}
    for key, w in workloads.items():
        local = named[key].most_common(1)[0][0] if named.get(key) else None
        if local is not None and (w.namespace, local) in lq_cq:
            out[key] = ("ClusterQueue", "", lq_cq[(w.namespace, local)])
        elif len(tenant_cqs.get(w.tenant, ())) == 1:
            out[key] = ("ClusterQueue", "", next(iter(tenant_cqs[w.tenant])))
        elif local is not None:
            out[key] = ("LocalQueue", w.namespace, local)
        else:
            out[key] = ("Tenant", "", w.tenant)
    return out


def _consolidations(
    con: duckdb.DuckDBPyConnection, start: datetime, end: datetime, workloads: Iterable[WorkloadSpread],
    domains: dict[str, dict[str, str | None]],
) -> dict[str, list[Consolidation]]:
    """Per spread workload (ref), what vacating its smallest share of a block (else rack) would free."""
    spread = [w for w in workloads if any(lv in w.levels and w.levels[lv].worse for lv in ("block", "rack"))]
    if not spread:
        return {}
    at = con.execute("SELECT max(ts) FROM allocations WHERE ts >= ? AND ts < ?", [start, end]).fetchone()
    if at is None or at[0] is None:
        return {}
    gpus = {str(g): (str(n), str(m or "")) for g, n, m in con.execute(
        "SELECT gpu_uuid, node, gpu_model FROM gpus WHERE last_seen IS NULL OR last_seen >= ?", [start]).fetchall()}
    holders: dict[str, set[tuple[str, str, str]]] = defaultdict(set)
    for gpu, ns, kind, name in con.execute(
        "SELECT DISTINCT gpu_uuid, namespace, coalesce(workload_kind, 'Pod'), coalesce(workload_name, pod) "
        "FROM allocations WHERE ts = ?", [at[0]]
    ).fetchall():
        holders[str(gpu)].add((str(ns), str(kind), str(name)))
    out: dict[str, list[Consolidation]] = {}
    for w in spread:
        level = "block" if "block" in w.levels and w.levels["block"].worse else "rack"
        me = (w.namespace, w.kind, w.name)
        mine = [g for g, h in holders.items() if me in h and g in gpus]
        per_domain = Counter(domains.get(gpus[g][0], {}).get(level) for g in mine)
        per_domain.pop(None, None)
        if len(per_domain) < 2:
            continue
        models = {gpus[g][1] for g in mine}

        def in_domain(domain: str | None, level: str = level) -> list[str]:
            return [g for g, (node, _) in gpus.items() if domains.get(node, {}).get(level) == domain]

        capacity = {d: sum(1 for g in in_domain(d) if gpus[g][1] in models) for d in per_domain}
        into = max(per_domain, key=lambda d: (capacity[d] >= w.devices, capacity[d], per_domain[d], d or ""))
        vacated_domains = sorted(str(d) for d in per_domain if d != into)
        vacated = [g for d in vacated_domains for g in in_domain(d)]
        moved = sum(n for d, n in per_domain.items() if d != into)
        others = sum(1 for g in vacated if holders.get(g, set()) - {me})
        busy_nodes = {gpus[g][0] for g in vacated if holders.get(g, set()) - {me}}
        my_nodes = {gpus[g][0] for g in vacated if me in holders.get(g, set())}
        free_target = sum(1 for g in in_domain(into) if gpus[g][1] in models and not holders.get(g))
        out[w.ref] = [Consolidation(f"{w.namespace}/{w.name}", level, ", ".join(vacated_domains), str(into), moved,
                                    others, tuple(sorted(my_nodes - busy_nodes)), free_target)]
    return out
