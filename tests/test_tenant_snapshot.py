"""The demo's per-tenant table: latest sample per node, active share only where activity is measured."""

from __future__ import annotations

from datetime import datetime

import duckdb
import pytest

from analytics.tenant_snapshot import current_holdings, render_holdings
from collector.schema import create_schema
from tests.support.bulk_insert import insert_rows

T0 = datetime(2026, 11, 1, 12, 0, 0)
T1 = datetime(2026, 11, 1, 12, 0, 15)


@pytest.fixture()
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect(":memory:")
    create_schema(c)
    c.executemany(
        "INSERT INTO devices (device_id, gpu_uuid, node, gpu_model, kind, profile, gpu_equivalents)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            ("MIG-a", "GPU-1", "n1", "H200", "mig", "3g.71gb", 3 / 7),
            ("MIG-b", "GPU-1", "n1", "H200", "mig", "1g.18gb", 1 / 7),
            ("MIG-c", "GPU-2", "n2", "A100", "mig", "1g.10gb", 1 / 7),
        ],
    )
    rows = []
    for ts, activity_a in ((T0, 0.9), (T1, 0.5)):
        rows.append((ts, "n1", "GPU-1", "MIG-a", activity_a))
        rows.append((ts, "n1", "GPU-1", "MIG-b", 0.0))
    rows.append((T0, "n2", "GPU-2", "MIG-c", None))
    c.executemany(
        "INSERT INTO device_samples (ts, node, gpu_uuid, device_id, activity_ratio, source) VALUES (?, ?, ?, ?, ?, 'test')",
        rows,
    )
    allocs = []
    for ts in (T0, T1):
        allocs.append((ts, "n1", "GPU-1", "MIG-a", "ml", "train-0", "main", "llm", 3 / 7))
        allocs.append((ts, "n1", "GPU-1", "MIG-b", "nb", "nb-0", "main", "notebooks", 1 / 7))
    allocs.append((T0, "n2", "GPU-2", "MIG-c", "ml", "infer-0", "main", "llm", 1 / 7))
    insert_rows(c, "allocations", ("ts", "node", "gpu_uuid", "device_id", "namespace", "pod", "container", "tenant",
                                    "gpu_equivalents", "source"), [(*a, "test") for a in allocs])
    return c


def test_holdings_use_each_nodes_latest_sample(con: duckdb.DuckDBPyConnection) -> None:
    holdings = {(h.tenant, h.profile): h for h in current_holdings(con)}
    llm_big = holdings[("llm", "3g.71gb")]
    assert llm_big.devices == 1
    assert llm_big.allocated_ge == pytest.approx(3 / 7)
    assert llm_big.active_ge == pytest.approx(3 / 7 * 0.5)  # T1 on n1, not T0


def test_unmeasured_devices_add_no_activity_but_are_counted(con: duckdb.DuckDBPyConnection) -> None:
    holdings = {(h.tenant, h.profile): h for h in current_holdings(con)}
    a100 = holdings[("llm", "1g.10gb")]
    assert a100.active_ge == 0
    assert a100.unmeasured_ge == pytest.approx(1 / 7)


def test_rendered_table_escapes_control_characters_in_tenant_names(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("UPDATE allocation_claims SET tenant = 'evil\nline' WHERE tenant = 'notebooks'")
    table = render_holdings(current_holdings(con))
    assert "evil\\nline" in table
    assert all("evil" not in line or "\\n" in line for line in table.splitlines())
    assert "n/a" in table  # the A100 MIG row has nothing measured
