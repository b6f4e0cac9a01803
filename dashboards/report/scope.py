"""Tenant scoping: one function narrows a store reader to some tenants, for the report, the app and exports.

:func:`scope_reader` returns a :class:`StoreReader` whose connections see the store through views of
the same names: rows of the scoped tenants only (their allocations, idle capacity, chargeback lines,
recommendations), the devices, GPUs and nodes they held, and the risk and health rows of those GPUs.
Every query of the reader (and the FOCUS export, which reads through the same connection) therefore
honours the scope without knowing about it. Fleet figures become the tenant's share: the fleet size is
what the tenant held, the cost split is its own cost.

Decisions are the fleet's, shown filtered, never decided again on the scoped rows: the MIG layout plan is
made over the whole store and narrowed by :func:`~analytics.miglayout.tenant_view.tenant_view`.

Other tenants never appear by name: in free text (risk reasons, health evidence, recommendation
reasons, event details) every name, namespace, pod, workload and queue of another tenant becomes
"another tenant". A table this module does not know is shown filtered by its ``tenant`` column, or
not at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from analytics.miglayout.tenant_view import tenant_view
from dashboards.report.data import StoreReader, open_store
from gpulens.core.errors import UserError

ANOTHER_TENANT = "another tenant"
"""What a co-tenant's name (or namespace, pod, workload, queue) reads as in a scoped view."""

STORE_CATALOG = "gpulens_store"
"""Name of the attached store inside a scoped connection."""

IDENTIFIERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("allocations", "tenant", ("namespace", "pod", "workload_name")),
    ("tenants", "tenant", ()),
    ("pod_snapshots", "tenant", ("namespace", "pod", "workload_name", "queue")),
    ("namespace_snapshots", "tenant", ("namespace",)),
    ("pending_demand", "tenant", ("namespace", "cluster_queue")),
    ("quota_snapshots", "tenant", ("object_namespace", "object_name")),
    ("recommendations", "tenant", ("target_namespace", "target_name")),
    ("chargeback", "x_Tenant", ("SubAccountName",)),
    ("isolation_risk", "tenant", ()),
    ("idle_capacity", "tenant", ()),
)
"""(table, tenant column, columns that name something of that tenant): where a tenant's names are found."""

_TENANT = "{col} IN (SELECT tenant FROM _scope_tenants)"
_DEVICE = "device_id IN (SELECT device_id FROM _scope_devices)"
_GPU = "gpu_uuid IN (SELECT gpu_uuid FROM _scope_devices)"
_NODE = "node IN (SELECT node FROM _scope_devices)"

ROW_RULES: dict[str, str] = {
    "nodes": _NODE,
    "gpus": _GPU,
    "devices": _DEVICE,
    "tenants": _TENANT.format(col="tenant"),
    "prices": "true",
    "device_samples": _DEVICE,
    "gpu_samples": _GPU,
    "allocations": _TENANT.format(col="tenant"),
    "events": _GPU,
    "quota_snapshots": _TENANT.format(col="tenant"),
    "pending_demand": _TENANT.format(col="tenant"),
    "namespace_snapshots": _TENANT.format(col="tenant"),
    "pod_snapshots": _TENANT.format(col="tenant"),
    "analysis_runs": "true",
    "idle_capacity": _TENANT.format(col="tenant"),
    "fragmentation": _NODE,
    "isolation_risk": f"(scope = 'tenant' AND {_TENANT.format(col='tenant')}) OR (scope = 'device' AND {_GPU})",
    "health": f"{_GPU} OR (gpu_uuid IS NULL AND {_NODE})",
    "chargeback": _TENANT.format(col='"x_Tenant"'),
    "recommendations": _TENANT.format(col="tenant"),
}
"""Which rows of each known table a scoped reader sees (SQL over the table's own columns)."""

TEXT_COLUMNS: dict[str, tuple[str, ...]] = {
    "events": ("detail",),
    "fragmentation": ("reason",),
    "isolation_risk": ("terms",),
    "health": ("evidence",),
    "recommendations": ("reasons", "evidence"),
    "analysis_runs": ("parameters",),
    "quota_snapshots": ("annotations",),
    "namespace_snapshots": ("labels",),
    "pod_snapshots": ("labels", "gpu_requests"),
}
"""Free-text columns of known tables, in which other tenants' names are replaced."""

HIDDEN_COLUMNS: dict[str, dict[str, str]] = {"analysis_runs": {"summary": "CAST('{}' AS JSON)"}}
"""Columns a scoped reader never sees (fleet-wide figures); each becomes the given constant."""


@dataclass(frozen=True)
class TenantScope:
    """Which tenants a view shows: ``tenants=None`` is everything (the platform team)."""

    tenants: frozenset[str] | None = None

    @classmethod
    def everything(cls) -> TenantScope:
        return cls(None)

    @classmethod
    def of(cls, tenants: Iterable[str]) -> TenantScope:
        return cls(frozenset(tenants))

    @property
    def sees_all(self) -> bool:
        return self.tenants is None

    @property
    def key(self) -> tuple[str, ...] | None:
        """A hashable, ordered form (for caches): None for everything."""
        return None if self.tenants is None else tuple(sorted(self.tenants))


@dataclass(frozen=True)
class Redactor:
    """Replaces other tenants' names in text with :data:`ANOTHER_TENANT`, never touching the viewer's own.

    At each position the longest known name wins, so an own name that contains another tenant's
    name (``vision`` and ``vis``) is kept whole.
    """

    kept: frozenset[str]
    hidden: frozenset[str]
    _pattern: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _kept_forms: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        hidden = {form for name in self.hidden for form in _forms(name)}
        kept = {form for name in self.kept for form in _forms(name)} - hidden
        object.__setattr__(self, "_kept_forms", frozenset(kept))
        names = sorted(hidden | kept, key=lambda n: (-len(n), n))
        pattern = re.compile("|".join(map(re.escape, names))) if hidden else None
        object.__setattr__(self, "_pattern", pattern)

    def text(self, value: str | None) -> str | None:
        """``value`` with every other tenant's name replaced."""
        if value is None or self._pattern is None:
            return value
        return self._pattern.sub(lambda m: m.group(0) if m.group(0) in self._kept_forms else ANOTHER_TENANT, value)

    def any_text(self, value: str | None) -> str | None:
        """Text that may hold a JSON document (a VARCHAR column of JSON) redacted so that it stays JSON."""
        if value is not None and value.lstrip()[:1] in ("[", "{"):
            return self.json_text(value)
        return self.text(value)

    def json_text(self, value: str | None) -> str | None:
        """A JSON document with every string value in it redacted; stays valid JSON with the same keys."""
        if value is None or self._pattern is None:
            return value
        try:
            document = json.loads(value)
        except ValueError:
            return self.text(value)
        return json.dumps(self._walk(document), ensure_ascii=False)

    def _walk(self, node: Any) -> Any:
        if isinstance(node, str):
            return self.text(node)
        if isinstance(node, list):
            return [self._walk(item) for item in node]
        if isinstance(node, dict):
            return {k: self._walk(v) for k, v in node.items()}  # keys are the schema, values the data
        return node


def _forms(name: str) -> set[str]:
    """A name as it may appear in stored text: as is and JSON-escaped (ASCII and not)."""
    return {name, json.dumps(name)[1:-1], json.dumps(name, ensure_ascii=False)[1:-1]} - {""}


@dataclass(frozen=True)
class TenantDirectory:
    """Every tenant of a store, the names that identify it, and the devices it held (read once)."""

    names: Mapping[str, frozenset[str]]
    """tenant -> its own name plus its namespaces, pods, workloads and queues."""
    devices: Mapping[str, frozenset[tuple[str, str, str]]]
    """tenant -> (device_id, gpu_uuid, node) it held at some time."""

    @property
    def tenants(self) -> tuple[str, ...]:
        return tuple(sorted(self.names))

    @classmethod
    def read(cls, reader: StoreReader) -> TenantDirectory:
        """Collect names and devices per tenant from every table that has them (missing ones skipped)."""
        reader.require_store()
        tables = reader.tables()
        names: dict[str, set[str]] = {}
        for table, tenant_col, name_cols in IDENTIFIERS:
            if table not in tables:
                continue
            present = reader.columns(table)
            if tenant_col not in present:
                continue
            cols = [c for c in name_cols if c in present]
            select = ", ".join(f'"{c}"' for c in (tenant_col, *cols))
            rows = reader.frame(
                f'SELECT DISTINCT {select} FROM "{table}" WHERE "{tenant_col}" IS NOT NULL'  # noqa: S608 - our names
            ).rows()
            for tenant, *values in rows:
                own = names.setdefault(str(tenant), {str(tenant)})
                own.update(str(v) for v in values if v)
        devices: dict[str, set[tuple[str, str, str]]] = {t: set() for t in names}
        for tenant, device, gpu, node in reader.frame(
            "SELECT DISTINCT tenant, device_id, gpu_uuid, node FROM allocations"
        ).rows():
            devices.setdefault(str(tenant), set()).add((str(device), str(gpu), str(node)))
        return cls({t: frozenset(n) for t, n in names.items()}, {t: frozenset(d) for t, d in devices.items()})

    def redactor(self, scope: TenantScope) -> Redactor:
        """The redactor for a viewer of ``scope``: others' names hidden, names the viewer shares kept."""
        own = scope.tenants or frozenset()
        kept = {n for t in own for n in self.names.get(t, frozenset({t}))} | set(own)
        hidden = {n for t, ns in self.names.items() if t not in own for n in ns} - kept
        return Redactor(frozenset(kept), frozenset(hidden))

    def scoped_devices(self, scope: TenantScope) -> set[tuple[str, str, str]]:
        return {d for t in (scope.tenants or ()) for d in self.devices.get(t, ())}


def scope_reader(reader: StoreReader, scope: TenantScope, directory: TenantDirectory | None = None) -> StoreReader:
    """``reader`` narrowed to ``scope`` (the one place where tenant scoping happens).

    Everything in scope returns ``reader`` itself. Otherwise the result is a reader of the same kind
    (held connection or one per query) on the same file, whose queries see only the scope's rows with
    other tenants' names replaced. ``directory`` saves re-reading the store's tenants (per-tenant runs).
    """
    if scope.sees_all:
        return reader
    directory = directory or TenantDirectory.read(reader)
    plan = _Plan(tuple(sorted(scope.tenants or ())), tuple(sorted(directory.scoped_devices(scope))),
                 directory.redactor(scope))
    return reader.reconnected(partial(_connect_scoped, plan=plan),
                              partial(tenant_view, tenants=plan.tenants, other=ANOTHER_TENANT))


@dataclass(frozen=True)
class _Plan:
    tenants: tuple[str, ...]
    devices: tuple[tuple[str, str, str], ...]
    redactor: Redactor


def _connect_scoped(db_path: str, *, plan: _Plan) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with the store attached read-only behind scoped views of its tables."""
    path = Path(db_path)
    con = duckdb.connect(":memory:")
    try:
        _attach(con, path)
        _scope_tables(con, plan)
        con.create_function("gpulens_redact", plan.redactor.any_text, ["VARCHAR"], "VARCHAR", side_effects=False)
        con.create_function("gpulens_redact_json", plan.redactor.json_text, ["VARCHAR"], "VARCHAR", side_effects=False)
        for table, columns in _store_columns(con).items():
            _scoped_view(con, table, columns)
    except BaseException:
        con.close()
        raise
    return con


def _attach(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    try:
        con.execute(f"ATTACH ? AS {STORE_CATALOG} (READ_ONLY)", [str(path)])
    except duckdb.Error as exc:
        open_store(path).close()  # raises the reader's own one-line message (missing, busy, foreign file)
        raise UserError(f"cannot open the store {path} read-only: {str(exc).strip().splitlines()[0]}") from exc


def _scope_tables(con: duckdb.DuckDBPyConnection, plan: _Plan) -> None:
    tenants = pa.table({"tenant": pa.array(plan.tenants, pa.string())})
    devices = pa.table({
        "device_id": pa.array([d for d, _, _ in plan.devices], pa.string()),
        "gpu_uuid": pa.array([g for _, g, _ in plan.devices], pa.string()),
        "node": pa.array([n for _, _, n in plan.devices], pa.string()),
    })
    con.register("_scope_tenants_in", tenants)
    con.register("_scope_devices_in", devices)
    con.execute("CREATE TABLE _scope_tenants AS SELECT * FROM _scope_tenants_in")
    con.execute("CREATE TABLE _scope_devices AS SELECT * FROM _scope_devices_in")
    con.unregister("_scope_tenants_in")
    con.unregister("_scope_devices_in")


def _store_columns(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str]]]:
    rows = con.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_catalog = ? AND table_schema = 'main' ORDER BY table_name, ordinal_position",
        [STORE_CATALOG],
    ).fetchall()
    out: dict[str, list[tuple[str, str]]] = {}
    for table, column, dtype in rows:
        out.setdefault(str(table), []).append((str(column), str(dtype)))
    return out


def _scoped_view(con: duckdb.DuckDBPyConnection, table: str, columns: list[tuple[str, str]]) -> None:
    """``table`` as a view of the same name: scoped rows, redacted text, hidden fleet columns."""
    names = {c for c, _ in columns}
    rule = ROW_RULES.get(table)
    if rule is None:  # a table we do not know: only its tenant's rows, all its text redacted
        rule = _TENANT.format(col="tenant") if "tenant" in names else "false"
        text = {c for c, t in columns if c != "tenant" and _is_text(t)}
    else:
        text = set(TEXT_COLUMNS.get(table, ()))
    hidden = HIDDEN_COLUMNS.get(table, {})
    select = ", ".join(_column_expr(c, t, text, hidden) for c, t in columns)
    source = f'{STORE_CATALOG}.main."{table}"'
    try:  # table and column names come from the store's own catalog, never from a tenant
        con.execute(f'CREATE VIEW "{table}" AS SELECT {select} FROM {source} WHERE {rule}')  # noqa: S608
    except duckdb.Error:  # an older store lacks a column the rule needs: show nothing of it
        con.execute(f'CREATE OR REPLACE VIEW "{table}" AS SELECT * FROM {source} WHERE false')  # noqa: S608


def _is_text(dtype: str) -> bool:
    return dtype in ("VARCHAR", "JSON", "VARCHAR[]")


def _column_expr(column: str, dtype: str, text: set[str], hidden: Mapping[str, str]) -> str:
    quoted = f'"{column}"'
    if column in hidden:
        return f"{hidden[column]} AS {quoted}"
    if column not in text:
        return quoted
    if dtype == "JSON":
        return f"CAST(gpulens_redact_json(CAST({quoted} AS VARCHAR)) AS JSON) AS {quoted}"
    if dtype == "VARCHAR[]":
        return f"list_transform({quoted}, lambda x: gpulens_redact(x)) AS {quoted}"
    if dtype == "VARCHAR":
        return f"gpulens_redact({quoted}) AS {quoted}"
    return quoted
