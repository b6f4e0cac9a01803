"""Who holds what right now: per-tenant devices and GPU-equivalents at each node's latest sample."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

_QUERY = """
WITH latest AS (
    SELECT node, max(ts) AS ts FROM allocations GROUP BY node
)
SELECT
    a.tenant,
    coalesce(d.profile, 'gpu') AS profile,
    count(*) AS devices,
    sum(a.gpu_equivalents) AS allocated_ge,
    coalesce(sum(a.gpu_equivalents * s.activity_ratio) FILTER (WHERE s.activity_ratio IS NOT NULL), 0)
        AS active_ge,
    coalesce(sum(a.gpu_equivalents) FILTER (WHERE s.activity_ratio IS NULL), 0) AS unmeasured_ge
FROM allocations a
JOIN latest l ON a.node = l.node AND a.ts = l.ts
LEFT JOIN devices d ON d.device_id = a.device_id
LEFT JOIN device_samples s ON s.device_id = a.device_id AND s.ts = a.ts
GROUP BY ALL
ORDER BY a.tenant, profile
"""


@dataclass(frozen=True)
class TenantHolding:
    """What one tenant holds of one profile across the fleet at the latest sample of each node."""

    tenant: str
    profile: str
    devices: int
    allocated_ge: float
    active_ge: float
    """Allocated share x measured activity; devices without an activity reading add nothing."""
    unmeasured_ge: float
    """Allocated GPU-equivalents whose activity the hardware cannot report (e.g. A100 MIG)."""


def current_holdings(con: duckdb.DuckDBPyConnection) -> list[TenantHolding]:
    """Per tenant and profile: devices and GPU-equivalents allocated and active, latest sample per node."""
    rows = con.execute(_QUERY).fetchall()
    return [TenantHolding(str(r[0]), str(r[1]), int(r[2]), float(r[3]), float(r[4]), float(r[5])) for r in rows]


def render_holdings(holdings: list[TenantHolding]) -> str:
    """A fixed-width table, one row per tenant and profile, with a total per tenant."""
    header = f"{'tenant':<24} {'profile':<10} {'devices':>7} {'alloc GE':>9} {'active GE':>9} {'active %':>8}"
    lines = [header, "-" * len(header)]
    by_tenant: dict[str, list[TenantHolding]] = {}
    for h in holdings:
        by_tenant.setdefault(h.tenant, []).append(h)
    for tenant, rows in by_tenant.items():
        for h in rows:
            lines.append(_row(tenant, h.profile, h.devices, h.allocated_ge, h.active_ge, h.unmeasured_ge))
        if len(rows) > 1:
            lines.append(
                _row(
                    tenant,
                    "(all)",
                    sum(h.devices for h in rows),
                    sum(h.allocated_ge for h in rows),
                    sum(h.active_ge for h in rows),
                    sum(h.unmeasured_ge for h in rows),
                )
            )
    return "\n".join(lines)


def _row(tenant: str, profile: str, devices: int, alloc: float, active: float, unmeasured: float) -> str:
    measured = alloc - unmeasured
    pct = f"{100 * active / measured:7.1f}%" if measured > 0 else "    n/a "
    if not tenant.isprintable():  # tenant-controlled: never let it move the cursor or break the table
        tenant = tenant.encode("unicode_escape").decode("ascii")
    name = tenant if len(tenant) <= 24 else tenant[:23] + "…"
    return f"{name:<24} {profile:<10} {devices:>7} {alloc:>9.2f} {active:>9.2f} {pct:>8}"
