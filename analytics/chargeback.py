"""Chargeback per tenant, namespace, workload and day with FOCUS 1.2 column names, reconciled to the cent.

Lines come from this run's ``idle_capacity`` rows (added up per day part when the part is written): a tenant pays its allocated GE-hours (active,
idle and unmeasured, each its own line) at the model's price, split over the namespaces and workloads that
held them in that state (``split_by_workload``; the tenant's total is unchanged), tagged with the namespace's
Kubernetes labels; unallocated capacity is its own
``__unallocated__`` line or is shared between that day's tenants evenly or in proportion to their
allocated cost (OpenCost's ``shareIdle``); time without data stays on an ``__unknown__`` line.
Per day, lines are rounded to cents by largest remainder so that they sum exactly to the fleet's
cost for that day: GPUs present x bucket hours x price, computed in ``Decimal``. A model the price book
does not price has no lines and no fleet cost (its money is not known, not zero); the run names it.
Where the book knows the share of a model's GPU-hours bought under a commitment (a FOCUS bill),
``x_CommittedCost`` is the part of a line's cost already paid for; NULL where it is not known.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_FLOOR, ROUND_HALF_EVEN, Decimal, localcontext
from pathlib import Path
from typing import Any

import duckdb

from analytics.cost_rules import UNALLOCATED_SHARING
from analytics.facts import Window
from analytics.focus_formats import chosen
from analytics.result_tables import append_columns, column_names
from gpulens.core.states import DeviceState

UNALLOCATED = "__unallocated__"
UNKNOWN = "__unknown__"
CENT = Decimal("0.01")
COST_STATES = {
    DeviceState.ALLOCATED_ACTIVE: "active",
    DeviceState.ALLOCATED_IDLE: "idle",
    DeviceState.ALLOCATED_UNMEASURED: "unmeasured",
    DeviceState.UNALLOCATED: "unallocated",
    DeviceState.UNKNOWN: "unknown",
}
"""The chargeback's cost state (FOCUS ``x_CostState``) of each device state."""
SHARED_UNALLOCATED = "shared-unallocated"
"""The cost state of unallocated capacity shared out to tenants (``--unallocated even|proportional``)."""
TENANT_COST_STATES = ("active", "idle", "unmeasured", SHARED_UNALLOCATED)
"""Every cost state a tenant's lines can have, in the order exports list them."""


def device_state_of(cost_state: str) -> DeviceState:
    """The device state whose time a chargeback line bills (shared-unallocated: unallocated)."""
    if cost_state == SHARED_UNALLOCATED:
        return DeviceState.UNALLOCATED
    return next(state for state, name in COST_STATES.items() if name == cost_state)


@dataclass
class Line:
    """One chargeback line before rounding."""

    day: date
    account: str
    tenant: str | None
    state: str
    model: str
    ge_hours: float
    gpu_hours: float
    """Priced GPU-hours (cost / list price): equals ge_hours unless MIG is prorated by memory."""
    namespace: str | None = None
    workload_kind: str | None = None
    workload: str | None = None
    """The Kubernetes namespace and workload (owner kind and name) of a tenant's held line; NULL on the
    tenant's shared-unallocated lines and the fleet's own lines."""


@dataclass(frozen=True)
class FleetCost:
    """The fleet's cost in the window from capacity x price alone: per day exact, rounded to the cent."""

    list_usd: Decimal
    contracted_usd: Decimal
    gpu_hours: Decimal


def apportion(amounts: list[float], total: Decimal) -> list[Decimal]:
    """Round ``amounts`` to cents so that they sum exactly to ``total`` (largest remainder). The amounts are
    taken to a billionth of a dollar first, so a line exactly on a half cent (1.625) is a tie however its
    float was summed (one claim's GE x its samples, or sample by sample), broken by the lines' order."""
    if not amounts:
        return []
    target_cents = int(_cents(total) / CENT)
    with localcontext() as ctx:
        ctx.prec = 40
        exact = [Decimal(repr(a)).quantize(NANO_USD, ROUND_HALF_EVEN) for a in amounts]
        raw_sum = sum(exact, Decimal(0))
        scaled = [
            a * target_cents / raw_sum if raw_sum else Decimal(target_cents) / len(amounts)
            for a in exact
        ]
        floors = [int(s.to_integral_value(ROUND_FLOOR)) for s in scaled]
        left = target_cents - sum(floors)
        order = sorted(range(len(amounts)), key=lambda i: (scaled[i] - floors[i], -i), reverse=True)
        for i in order[:left]:
            floors[i] += 1
    return [Decimal(c) * CENT for c in floors]


NANO_USD = Decimal("1e-9")
"""What ``apportion`` reads of an amount: a billionth of a dollar, below any price's precision."""


def _cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, ROUND_HALF_EVEN)


FLEET_SELECT = """
WITH present AS (  -- each (GPU, bucket) once: a GPU of one device in an_db, a split GPU in an_gpub
    SELECT gk, b FROM an_db WHERE NOT multi_device
    UNION ALL
    SELECT gk, b FROM an_gpub
),
per_bucket AS (
    SELECT p.b, g.list_price, g.contracted_price, count(*) AS gpus
    FROM present p
    JOIN (SELECT gk, any_value(list_price) AS list_price, any_value(contracted_price) AS contracted_price
          FROM an_dev GROUP BY gk) g USING (gk)
    WHERE g.list_price IS NOT NULL  -- an unpriced model has no cost, not a zero one
    GROUP BY ALL
)
SELECT $part_id, CAST($start::TIMESTAMP + to_seconds(b * $bs) AS DATE) AS day, list_price, contracted_price,
       sum(gpus) AS gpu_buckets
FROM per_bucket GROUP BY ALL
"""
"""``part_fleet`` rows of one day part: GPUs present x buckets per day and price (from ``an_db``, ``an_gpub``)."""

LINES_SELECT = """
SELECT $part_id, CAST(bucket_start AS DATE) AS day, tenant, state, coalesce(gpu_model, '') AS model,
       fsum(ge_hours) AS ge_hours, fsum(cost_usd) AS cost_usd
FROM idle_capacity_parts WHERE part_id = $part_id GROUP BY ALL
"""
"""``part_lines`` rows of one day part: its ``idle_capacity`` rows added up per day, tenant, state and model."""


def insert_part_inputs(con: duckdb.DuckDBPyConnection, part_id: str, window: Window) -> None:
    """Write a day part's chargeback inputs (``part_fleet``, ``part_lines``; the caller holds the transaction)."""
    con.execute("INSERT INTO part_fleet " + FLEET_SELECT,
                {"part_id": part_id, "start": window.start, "bs": window.bucket_seconds})
    con.execute("INSERT INTO part_lines " + LINES_SELECT, {"part_id": part_id})


def insert_part_workloads(con: duckdb.DuckDBPyConnection, part_id: str, window: Window) -> None:
    """Write a day part's ``part_workloads`` (who inside each tenant held its time; the caller holds the
    transaction)."""
    con.execute("INSERT INTO part_workloads " + PART_WORKLOADS,
                {"part_id": part_id, "start": window.start, "bs": window.bucket_seconds})


def fleet_cost(con: duckdb.DuckDBPyConnection, window: Window) -> tuple[FleetCost, dict[date, tuple[Decimal, Decimal]]]:
    """Fleet cost per day (list, contracted): each GPU present in a bucket costs bucket hours x price
    (``an_fleet``: the window's ``part_fleet`` rows)."""
    rows = con.execute(
        "SELECT day, list_price, contracted_price, sum(gpu_buckets) FROM an_fleet GROUP BY ALL ORDER BY ALL"
    ).fetchall()
    per_day: dict[date, tuple[Decimal, Decimal]] = defaultdict(lambda: (Decimal(0), Decimal(0)))
    hours_total = Decimal(0)
    with localcontext() as ctx:
        ctx.prec = 50
        bucket_hours = Decimal(window.bucket_seconds) / Decimal(3600)
        for day, list_price, contracted_price, n in rows:
            hours = bucket_hours * n
            lp, cp = per_day[day]
            per_day[day] = (lp + hours * Decimal(repr(list_price)), cp + hours * Decimal(repr(contracted_price)))
            hours_total += hours
    total = FleetCost(  # what the lines reconcile with: each day's cost rounded to the cent, summed
        list_usd=sum((_cents(v[0]) for v in per_day.values()), Decimal(0)),
        contracted_usd=sum((_cents(v[1]) for v in per_day.values()), Decimal(0)),
        gpu_hours=hours_total,
    )
    return total, dict(per_day)


def _lines(con: duckdb.DuckDBPyConnection) -> list[Line]:
    """The window's lines (``an_lines``: its ``part_lines`` rows; one part per day, so sums are the parts')."""
    rows = con.execute(
        """
        WITH lines AS (
            SELECT day, tenant, state, model, fsum(ge_hours) AS ge_hours, fsum(cost_usd) AS cost_usd
            FROM an_lines GROUP BY ALL
        ),
        price AS (SELECT coalesce(gpu_model, '') AS model, any_value(list_price) AS list_price FROM an_dev GROUP BY ALL)
        SELECT l.day, l.tenant, l.state, l.model, l.ge_hours, l.cost_usd / p.list_price
        FROM lines l JOIN price p USING (model)
        WHERE p.list_price IS NOT NULL
        ORDER BY ALL
        """
    ).fetchall()
    lines = []
    for day, tenant, state, model, ge_h, gpu_h in rows:
        cost_state = COST_STATES[state]
        account = tenant if tenant is not None else (UNKNOWN if cost_state == "unknown" else UNALLOCATED)
        lines.append(Line(day, account, tenant, cost_state, model, float(ge_h), float(gpu_h or 0.0)))
    return lines


def share_unallocated(lines: list[Line], policy: str, list_prices: dict[str, float]) -> list[Line]:
    """Spread each day's unallocated lines over that day's tenants by the rule ``policy`` names
    (:data:`~analytics.cost_rules.UNALLOCATED_SHARING`: ``even``, or ``proportional`` to each tenant's
    allocated cost that day, OpenCost's ShareWeighted); ``own-line`` keeps them on their own line."""
    rule = UNALLOCATED_SHARING.load(policy)
    if rule is None:
        return lines
    out = [ln for ln in lines if ln.state != "unallocated"]
    by_day: dict[date, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for ln in out:
        if ln.tenant is not None:
            by_day[ln.day][ln.tenant] += ln.gpu_hours * list_prices.get(ln.model, 0.0)
    for ln in (x for x in lines if x.state == "unallocated"):
        weights = by_day.get(ln.day)
        if not weights:
            out.append(ln)
            continue
        shares = rule(weights)
        for tenant, share in sorted(shares.items()):
            out.append(
                Line(ln.day, tenant, tenant, SHARED_UNALLOCATED, ln.model, ln.ge_hours * share, ln.gpu_hours * share)
            )
    return out


PART_WORKLOADS = """
SELECT $part_id, CAST($start::TIMESTAMP + to_seconds(h.b * $bs) AS DATE) AS day, h.tenant,
       coalesce(d.gpu_model, '') AS model, h.namespace, coalesce(h.workload_kind, '') AS workload_kind,
       coalesce(h.workload_name, '') AS workload, h.state, fsum(h.ge) AS ge_samples
FROM (
    SELECT dk, b, tenant, namespace, workload_kind, workload_name, 'idle' AS state, ge_idle AS ge, samples_idle AS n
    FROM an_hold
    UNION ALL
    SELECT dk, b, tenant, namespace, workload_kind, workload_name, 'active', ge_active, samples_active FROM an_hold
    UNION ALL
    SELECT dk, b, tenant, namespace, workload_kind, workload_name, 'unmeasured', ge_unmeasured, samples_unmeasured
    FROM an_hold
) h JOIN an_dev d USING (dk)
WHERE h.tenant IS NOT NULL AND h.n > 0
GROUP BY ALL
"""
"""``part_workloads`` rows of one day part: per day, tenant, GPU model, namespace, workload and cost state, the
GE-samples each workload held, each held time classed by the device sample at its own time (``an_hold``, the
holders ``idle_capacity`` is made of, per workload: the same classes, no second join of samples)."""


def split_by_workload(lines: list[Line], weights: list[tuple[Any, ...]]) -> list[Line]:
    """Split each tenant's held line (day, state, model) over its namespaces and workloads in proportion to
    the GE-samples each held in that state: the tenant's line total is unchanged (``idle_capacity``'s),
    only who inside the tenant held it is added. A line no workload row explains stays whole."""
    shares: dict[tuple[object, ...], list[tuple[str, str, str, float]]] = defaultdict(list)
    for day, tenant, model, namespace, kind, workload, state, ge in weights:
        shares[(day, tenant, model, state)].append((str(namespace), str(kind), str(workload), float(ge)))
    out: list[Line] = []
    for ln in lines:
        parts = shares.get((ln.day, ln.tenant, ln.model, ln.state)) if ln.tenant is not None else None
        total = sum(p[3] for p in parts) if parts else 0.0
        if not parts or total <= 0:
            out.append(ln)
            continue
        for namespace, kind, workload, ge in sorted(parts):
            f = ge / total
            out.append(Line(ln.day, ln.account, ln.tenant, ln.state, ln.model, ln.ge_hours * f, ln.gpu_hours * f,
                            namespace, kind or None, workload or None))
    return out


PROVIDER_TAG_PREFIX = "gpulens/"
"""Tags gpulens defines itself; a Kubernetes label with this prefix never replaces one of them."""


@dataclass(frozen=True)
class NamespaceLabels:
    """Kubernetes labels of the namespaces in a window, for FOCUS ``Tags``."""

    by_namespace: dict[str, dict[str, str]]
    """Each namespace's labels in its newest snapshot before the window's end."""
    by_tenant: dict[str, dict[str, str]]
    """Per tenant, the labels (key and value) every namespace of the tenant carries."""


def namespace_labels(con: duckdb.DuckDBPyConnection, window: Window) -> NamespaceLabels:
    """The labels of each namespace (newest snapshot before the window's end) and those a tenant's namespaces
    share. Label text is the tenant's own: data, never a gpulens tag."""
    rows = con.execute(
        """
        SELECT tenant, namespace, CAST(labels AS VARCHAR) FROM f_namespace_snapshots
        WHERE ts < $end
        QUALIFY row_number() OVER (PARTITION BY namespace ORDER BY ts DESC) = 1
        ORDER BY tenant, namespace
        """,
        {"end": window.end},
    ).fetchall()
    by_namespace: dict[str, dict[str, str]] = {}
    per_tenant: dict[str, list[dict[str, str]]] = defaultdict(list)
    for tenant, namespace, labels in rows:
        parsed = json.loads(labels) if labels else {}
        flat = {str(k): str(v) for k, v in sorted(parsed.items()) if not str(k).startswith(PROVIDER_TAG_PREFIX)} \
            if isinstance(parsed, dict) else {}
        by_namespace[str(namespace)] = flat
        per_tenant[str(tenant)].append(flat)
    by_tenant = {}
    for tenant, spaces in per_tenant.items():
        common = dict(spaces[0])
        for labels in spaces[1:]:
            common = {k: v for k, v in common.items() if labels.get(k) == v}
        by_tenant[tenant] = common
    return NamespaceLabels(by_namespace, by_tenant)


def line_tags(ln: Line, labels: NamespaceLabels) -> str:
    """The FOCUS ``Tags`` of a line (a JSON object): the Kubernetes labels of its namespace (of a tenant-level
    line: those all the tenant's namespaces share), its namespace and workload, and gpulens's own tags."""
    tags: dict[str, str | None] = {}
    if ln.namespace is not None:
        tags.update(labels.by_namespace.get(ln.namespace, {}))
        tags["k8s/namespace"] = ln.namespace
        if ln.workload is not None:
            tags["k8s/workload-kind"] = ln.workload_kind
            tags["k8s/workload"] = ln.workload
    elif ln.tenant is not None:
        tags.update(labels.by_tenant.get(ln.tenant, {}))
    tags.update({"gpulens/tenant": ln.tenant, "gpulens/state": ln.state, "gpulens/gpu-model": ln.model})
    return json.dumps(tags, ensure_ascii=False)


def insert_chargeback(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    window: Window,
    prices: dict[str, tuple[float, float, float | None]],
    mig_proration: str,
    policy: str,
) -> FleetCost:
    """Write this run's chargeback lines, each tenant's split by namespace and workload (``an_workloads``: the
    window's ``part_workloads``); returns the fleet cost they reconcile with. ``prices``: list, paid and
    committed share (None: not known) of each priced model."""
    labels = namespace_labels(con, window)
    fleet, per_day = fleet_cost(con, window)
    weights = con.execute(
        "SELECT day, tenant, model, namespace, workload_kind, workload, state, ge_samples FROM an_workloads"
    ).fetchall()
    held = split_by_workload(_lines(con), weights)
    lines = share_unallocated(held, policy, {m: p[0] for m, p in prices.items()})
    by_day: dict[date, list[Line]] = defaultdict(list)
    for ln in lines:
        by_day[ln.day].append(ln)
    cols: dict[str, list[object]] = {c: [] for c in column_names("chargeback")}
    for day, day_lines in sorted(by_day.items()):
        list_target, contracted_target = per_day.get(day, (Decimal(0), Decimal(0)))
        list_raw = [ln.gpu_hours * prices[ln.model][0] for ln in day_lines]
        contracted_raw = [ln.gpu_hours * prices[ln.model][1] for ln in day_lines]
        list_cents = apportion(list_raw, list_target)
        contracted_cents = apportion(contracted_raw, contracted_target)
        start = max(datetime.combine(day, datetime.min.time()), window.start)
        end = min(datetime.combine(day, datetime.min.time()) + timedelta(days=1), window.end)
        for ln, lc, cc, raw in zip(day_lines, list_cents, contracted_cents, contracted_raw, strict=True):
            _append(cols, run_id, window, ln, start, end, lc, cc, raw, prices, mig_proration, policy,
                    line_tags(ln, labels))
    append_columns(con, "chargeback", cols)
    return fleet


def _append(
    cols: dict[str, list[object]],
    run_id: str,
    window: Window,
    ln: Line,
    start: datetime,
    end: datetime,
    list_cost: Decimal,
    contracted_cost: Decimal,
    raw: float,
    prices: dict[str, tuple[float, float, float | None]],
    mig_proration: str,
    policy: str,
    tags: str,
) -> None:
    who = ln.tenant if ln.tenant is not None else ("unallocated capacity" if ln.state == "unallocated" else "no data")
    if ln.namespace is not None:
        who += f", namespace {ln.namespace}" + (f", {ln.workload_kind or 'workload'} {ln.workload}" if ln.workload else "")
    values: dict[str, object] = {
        "run_id": run_id,
        "window_start": window.start,
        "window_end": window.end,
        "BillingAccountId": "gpulens",
        "BillingCurrency": "USD",
        "BillingPeriodStart": window.start,
        "BillingPeriodEnd": window.end,
        "ChargePeriodStart": start,
        "ChargePeriodEnd": end,
        "ChargeCategory": "Usage",
        "ChargeDescription": f"{ln.model or 'GPU'} GPU-hours, {ln.state}, {who}",
        "BilledCost": contracted_cost,
        "EffectiveCost": contracted_cost,
        "ListCost": list_cost,
        "ContractedCost": contracted_cost,
        "PricingQuantity": ln.gpu_hours,
        "PricingUnit": "GPU-Hour",
        "ListUnitPrice": prices[ln.model][0],
        "ContractedUnitPrice": prices[ln.model][1],
        "ProviderName": "gpulens",
        "PublisherName": "gpulens",
        "InvoiceIssuerName": "gpulens",
        "ServiceName": "GPU compute",
        "ServiceCategory": "AI and Machine Learning",
        "ResourceId": f"gpulens/gpu-model/{ln.model}",
        "ResourceName": f"{ln.model} GPUs",
        "ResourceType": "GPU",
        "SubAccountId": ln.account,
        "SubAccountName": ln.account,
        "Tags": tags,
        "x_Tenant": ln.tenant,
        "x_CostState": ln.state,
        "x_GpuModel": ln.model,
        "x_GeHours": ln.ge_hours,
        "x_UnroundedCost": raw,
        "x_MigProration": mig_proration,
        "x_UnallocatedPolicy": policy,
        "x_Namespace": ln.namespace,
        "x_WorkloadKind": ln.workload_kind,
        "x_Workload": ln.workload,
        "x_CommittedCost": committed_part(contracted_cost, prices[ln.model][2]),
    }
    for name, value in values.items():
        cols[name].append(value)


ORDER_BY = ("ChargePeriodStart", "SubAccountId", "x_GpuModel", "x_CostState", "x_Namespace", "x_WorkloadKind",
            "x_Workload")
"""The order of the FOCUS files' rows."""


def committed_part(cost: Decimal, committed_share: float | None) -> Decimal | None:
    """The part of ``cost`` bought under a commitment (already paid whether used or not); None: not known."""
    if committed_share is None:
        return None
    return _cents(cost * Decimal(repr(committed_share)))


def write_focus(
    con: duckdb.DuckDBPyConnection, run_id: str, out_dir: Path, formats: tuple[str, ...] | None = None
) -> list[Path]:
    """Write this run's chargeback (FOCUS columns and x_ columns) into ``out_dir`` in each of ``formats``
    (names of :data:`~analytics.focus_formats.FOCUS_FORMATS`; None: every one); returns the files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    focus_cols = [c for c in column_names("chargeback") if c not in ("run_id", "window_start", "window_end")]
    present = {str(d[0]) for d in con.execute("SELECT * FROM chargeback LIMIT 0").description or ()}
    # A store analysed by an older release lacks the newest x_ columns: they come out empty, same header.
    select = ", ".join(f'"{c}"' if c in present else f'NULL::VARCHAR AS "{c}"' for c in focus_cols)
    order = ", ".join(f'"{c}" NULLS FIRST' for c in ORDER_BY if c in present)
    table = con.sql(
        f"SELECT {select}, run_id AS x_RunId FROM chargeback WHERE run_id = $run_id "  # noqa: S608 - fixed columns
        f"ORDER BY {order}",
        params={"run_id": run_id},
    ).to_arrow_table()
    paths = []
    for fmt in chosen(formats):
        fmt.write(table, fmt.path(out_dir))
        paths.append(fmt.path(out_dir))
    return paths
