"""Isolation-risk reasons name who is meant: sorted names, the first five and a count, and JSON text as json.dumps.

Node n1 (NVLink domain d1): GPU-A time-sliced, held by seven tenants ``a``, ``a-b``, ``b`` .. ``f`` whose
namespaces have no NetworkPolicy (``a`` has two); GPU-B exclusive, held by ``g1`` and ``g2``. The names
a reason lists are ``tenant/namespace`` strings sorted as strings: ``a-b/nab`` comes before ``a/na1``
('-' sorts before '/'), although tenant ``a`` comes before tenant ``a-b``.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics import isolation
from analytics.run import analyze
from analytics.settings import AnalysisSettings, RiskWeights
from tests.support.analytics_fleet import T0, Fleet
from tests.support.bulk_insert import insert_rows

END = T0 + timedelta(hours=1)
SHARERS = {"a": ("na1", "na2"), "a-b": ("nab",), "b": ("nb",), "c": ("nc",), "d": ("nd",), "e": ("ne",), "f": ("nf",)}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n1", nvlink_domain="d1")
    f.gpu("GPU-A", "n1", mode="time-slicing", replicas=8)
    f.gpu("GPU-B", "n1")
    f.samples("GPU-A", count=60, activity=0.4)
    f.samples("GPU-B", count=60, activity=0.9)
    for tenant, namespaces in SHARERS.items():
        for i, ns in enumerate(namespaces):
            f.alloc("GPU-A", tenant, count=60, ge=0.125, namespace=ns, pod=f"{tenant}-{i}")
            f.namespace(ns, tenant, policies=0)
    for tenant in ("g1", "g2"):
        f.alloc("GPU-B", tenant, count=60, ge=0.5, namespace=tenant, pod=tenant)
        f.namespace(tenant, tenant, policies=1)
    f.close()
    return path


def reasons(path: Path, run_id: str) -> dict[tuple[str, str], dict[str, str]]:
    con = duckdb.connect(str(path), read_only=True)
    rows = con.execute(
        "SELECT scope, coalesce(tenant, gpu_uuid), terms FROM isolation_risk WHERE run_id = ?", [run_id]
    ).fetchall()
    con.close()
    return {(s, k): {t["term"]: t["reason"] for t in json.loads(terms)} for s, k, terms in rows}


def test_reasons_list_the_first_five_sorted_names_and_count_the_rest(store: Path) -> None:
    summary = analyze(store, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=END))
    got = reasons(store, summary.run_id)
    gpu_a, gpu_b, a = got[("device", "GPU-A")], got[("device", "GPU-B")], got[("tenant", "a")]
    # a GPU's row counts the tenants besides one (the first by name); a tenant's row those besides itself
    assert gpu_a["gpu_cotenants"] == "6 other tenant(s) on this GPU: a-b, b, c, d, e (+1 more)"
    assert a["gpu_cotenants"] == "6 other tenant(s) on this GPU: a-b, b, c, d, e (+1 more)"
    assert got[("tenant", "c")]["gpu_cotenants"] == "6 other tenant(s) on this GPU: a, a-b, b, d, e (+1 more)"
    assert gpu_a["node_cotenants"] == "2 other tenant(s) on the node or NVLink domain: g1, g2"
    assert gpu_b["node_cotenants"] == "7 other tenant(s) on the node or NVLink domain: a, a-b, b, c, d (+2 more)"
    # eight namespaces without a policy, sorted as the names the reason shows
    assert gpu_a["no_network_policy"] == "no NetworkPolicy in namespace(s) a-b/nab, a/na1, a/na2, b/nb, c/nc (+3 more)"
    assert a["no_network_policy"] == "no NetworkPolicy in namespace(s) a/na1, a/na2"
    assert gpu_a["no_dedicated_pool_or_vcluster"] == (
        "neither a dedicated pool nor a virtual cluster: a, a-b, b, c, d (+2 more)"
    )
    assert "no_network_policy" not in gpu_b and "no_network_policy" not in got[("tenant", "g1")]
    assert gpu_b["no_dedicated_pool_or_vcluster"] == "neither a dedicated pool nor a virtual cluster: g1, g2"


def test_terms_are_the_text_json_dumps_writes_for_names_that_need_escaping(tmp_path: Path) -> None:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n1")
    f.gpu("GPU-A", "n1", mode="mps", replicas=4)
    f.gpu("GPU-B", "n1")
    f.samples("GPU-A", count=60)
    f.samples("GPU-B", count=60)
    hostile = ['q"uote', "équipe", "back\\slash", "tab\tbed", "<b>&"]
    for i, tenant in enumerate(hostile):
        f.alloc("GPU-A", tenant, count=60, ge=0.25, namespace=f"ns-{i}", pod=f"p{i}")
        f.namespace(f"ns-{i}", tenant, policies=0)
    f.alloc("GPU-B", "plain", count=60, namespace="plain")
    f.xid("GPU-A", 31, T0 + timedelta(minutes=3), count=3)
    f.close()
    weights = RiskWeights(mode_mps=33.3, per_gpu_cotenant=7.25, per_node_cotenant=2.5, per_shared_fault=0.1)
    summary = analyze(path, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=END, risk=weights))
    con = duckdb.connect(str(path), read_only=True)
    rows = con.execute("SELECT scope, tenant, score, terms FROM isolation_risk WHERE run_id = ?",
                       [summary.run_id]).fetchall()
    con.close()
    assert {t for s, t, _, _ in rows if s == "tenant"} == {*hostile, "plain"}
    for _, _, score, text in rows:
        terms = json.loads(text)
        assert text == json.dumps(terms)  # ASCII-escaped, the keys in order, numbers as Python writes them
        assert score == sum(t["points"] for t in terms)
    mps = next(json.loads(text) for s, t, _, text in rows if s == "device" and "mps" in text)
    named = next(t["reason"] for t in mps if t["term"] == "gpu_cotenants")
    assert named == '4 other tenant(s) on this GPU: back\\slash, q"uote, tab\tbed, équipe'  # all but '<b>&'
    assert next(t["points"] for t in mps if t["term"] == "gpu_cotenants") == 29.0


holdings = st.lists(
    st.tuples(st.sampled_from(["GPU-1/0", "GPU-1/1", "GPU-2/0", "GPU-3/0", "gone/0"]),
              st.sampled_from(["a", "a-b", "a/b", "", "é", 'q"', "b", "t-1", "t-10"])),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(held=holdings)
def test_both_reads_of_a_gpus_tenants_give_the_same_bits(held: list[tuple[str, str]]) -> None:
    """A GPU's tenants as bits of the sorted names, read as bit strings (few tenants) or lists (many): the same
    sets, every device of the GPU counted once, a device outside the inventory not at all."""
    con = duckdb.connect()
    con.execute("CREATE TEMP TABLE an_alloc (device_id VARCHAR, tenant VARCHAR, namespace VARCHAR)")
    con.execute("CREATE TEMP TABLE an_dev (device_id VARCHAR, gpu_uuid VARCHAR)")
    for device in ("GPU-1/0", "GPU-1/1", "GPU-2/0", "GPU-3/0"):
        con.execute("INSERT INTO an_dev VALUES (?, ?)", [device, device.split("/")[0]])
    insert_rows(con, "an_alloc", ("device_id", "tenant", "namespace"), [(d, t, "ns") for d, t in held])
    names = isolation._tenant_names(con)
    expected: dict[str, set[str]] = {}
    for device, tenant in held:
        if not device.startswith("gone"):
            expected.setdefault(device.split("/")[0], set()).add(tenant)
    for most in (isolation.BITSTRING_MOST, 0):
        bits = isolation._tenant_bits(con, names, bitstring_most=most)
        assert {gpu: {n for i, n in enumerate(names) if b >> i & 1} for gpu, b in bits.items()} == expected


def test_a_namespace_used_only_on_a_device_the_inventory_does_not_list_is_still_named(tmp_path: Path) -> None:
    """Tenant t held the listed GPU-A from namespace na and GPU-Z, which the inventory does not list, from nz:
    both namespaces lack a NetworkPolicy, and t's row names both."""
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n1")
    f.gpu("GPU-A", "n1")
    f.samples("GPU-A", count=60, activity=0.5)
    f.alloc("GPU-A", "t", count=60, namespace="na", pod="t-a")
    insert_rows(f.con, "allocations", ("ts", "node", "gpu_uuid", "device_id", "namespace", "pod", "container",
                                       "tenant", "gpu_equivalents", "source"),
                [(T0 + timedelta(seconds=60 * i), "n1", "GPU-Z", "GPU-Z", "nz", "t-z", "main", "t", 1.0, "test")
                 for i in range(60)])
    for ns in ("na", "nz"):
        f.namespace(ns, "t", policies=0)
    f.close()
    summary = analyze(path, AnalysisSettings(window_seconds=3600, bucket_seconds=1800, end=END))
    assert reasons(path, summary.run_id)[("tenant", "t")]["no_network_policy"] == "no NetworkPolicy in namespace(s) t/na, t/nz"
