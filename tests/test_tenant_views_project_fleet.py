"""A tenant's view shows the fleet's decisions filtered to its rows, number for number, never decisions made
again on its filtered data (on the session's demo store, and on a plan where a GPU is shared)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime

import polars as pl
import pytest

from analytics.miglayout import GpuState, InstanceDemand, LayoutRun, plan_layout
from analytics.miglayout.tenant_view import SHARED_DEVICE, tenant_view
from analytics.prices import Price, PriceBook
from dashboards.report.data import StoreReader
from dashboards.report.mig_layout_section import layout_run_section, mig_layout_section
from dashboards.report.scope import (
    ANOTHER_TENANT,
    Redactor,
    TenantDirectory,
    TenantScope,
    scope_reader,
)
from tests.support.demo_run import DemoRun

_ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
_CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.S)
DECIDED = ["scope", "target_kind", "target_namespace", "target_name", "flavor", "resource", "gpu_model",
           "current_profile", "recommended_profile", "current_value", "recommended_value", "next_value", "action",
           "confidence", "confidence_label", "history_days", "reasons"]


@pytest.fixture(scope="module")
def fleet(demo_run: DemoRun) -> Iterator[tuple[StoreReader, TenantDirectory]]:
    assert demo_run.proc.returncode == 0, demo_run.proc.stderr[-3000:]
    reader = StoreReader.open(demo_run.store)
    try:
        yield reader, TenantDirectory.read(reader)
    finally:
        reader.close()


def _rows(html: str) -> list[tuple[str, ...]]:
    return [tuple(_CELL.findall(r)) for r in _ROW.findall(html) if "<td" in r]


def _redacted(rows: list[tuple[str, ...]], redactor: Redactor) -> set[tuple[str, ...]]:
    return {tuple(redactor.text(c) or "" for c in row) for row in rows}


@pytest.mark.slow
def test_every_tenants_recommendations_are_the_fleets_rows_for_that_tenant_number_for_number(
    fleet: tuple[StoreReader, TenantDirectory],
) -> None:
    reader, directory = fleet
    everything = reader.recommendations()
    for tenant in directory.tenants:
        scope = TenantScope.of([tenant])
        redactor = directory.redactor(scope)
        mine = scope_reader(reader, scope, directory).recommendations().select(DECIDED)
        theirs = everything.filter(pl.col("tenant") == tenant).select(DECIDED).with_columns(
            pl.col("reasons").map_elements(redactor.text, return_dtype=pl.String))
        assert sorted(mine.rows(), key=repr) == sorted(theirs.rows(), key=repr), tenant


@pytest.mark.slow
def test_every_tenants_mig_layout_section_shows_rows_of_the_fleets_plan_and_the_tenants_own_share(
    fleet: tuple[StoreReader, TenantDirectory],
) -> None:
    reader, directory = fleet
    plan = reader.mig_layout()
    assert plan is not None
    fleet_rows = _rows(mig_layout_section(reader))
    shown: set[str] = set()
    with_rows = 0
    for tenant in directory.tenants:
        scope = TenantScope.of([tenant])
        scoped = scope_reader(reader, scope, directory)
        view = scoped.mig_layout()
        assert view is not None
        own = {d.workload for d in plan.plan.demands if d.tenant == tenant}
        assert {d.workload for d in view.plan.demands} == own
        assert {u for u in view.plan.unplaced} == {u for u in plan.plan.unplaced if u.workload in own}
        assert {r for r in view.plan.reused} == {r for r in plan.plan.reused if r.workload in own}
        rows = _rows(mig_layout_section(scoped))
        assert set(rows) <= _redacted(fleet_rows, directory.redactor(scope)), tenant
        with_rows += bool(rows)
        shown |= own
    assert shown == {d.workload for d in plan.plan.demands}  # every planned workload is some tenant's row
    assert with_rows >= 2  # the demo plans for two tenants: the check compared rows


def _sharing_plan() -> LayoutRun:
    """Two tenants' whole-GPU servers both move to 1g.18gb; the fleet packs them onto one H200."""
    gpus = [GpuState("g0", "node-a", 0, "H200", (), (), frozenset({"a/Deployment/chat"})),
            GpuState("g1", "node-a", 1, "H200", (), (), frozenset({"b/Deployment/embed"}))]
    demands = [InstanceDemand("a/Deployment/chat", "a", "Deployment", "chat", "team-a", "H200", "1g.18gb", 2, "gpu",
                              1.0, ("main",)),
               InstanceDemand("b/Deployment/embed", "b", "Deployment", "embed", "team-b", "H200", "1g.18gb", 2, "gpu",
                              1.0, ("main",))]
    book = PriceBook({"H200": Price("H200", 4.0, None, "test")}, "test")
    return LayoutRun(plan_layout(gpus, demands), datetime(2026, 1, 1), datetime(2026, 1, 15), book)


def test_a_change_that_serves_another_tenant_is_shown_as_shared_and_decided_fleet_wide_without_its_name() -> None:
    run = _sharing_plan()
    (change,) = run.plan.changes
    assert {w for w, _ in change.serves} == {"a/Deployment/chat", "b/Deployment/embed"}
    view = tenant_view(run, ["team-a"], ANOTHER_TENANT)
    (seen,) = view.plan.changes
    assert seen.shared and (seen.layout, seen.placements, seen.spare) == (change.layout, change.placements, change.spare)
    assert sorted(seen.serves) == sorted([("a/Deployment/chat", "1g.18gb")] * 2 + [(ANOTHER_TENANT, "1g.18gb")] * 2)
    assert [d.workload for d in view.plan.demands] == ["a/Deployment/chat"]
    fleet_freed = run.usd_per_month_freed
    assert fleet_freed is not None  # H200 is priced in the book
    assert view.usd_per_month_freed == pytest.approx(fleet_freed / 2)  # its own part of the money
    html = layout_run_section(view)
    assert SHARED_DEVICE in html and "embed" not in html and "team-b" not in html
    assert SHARED_DEVICE not in layout_run_section(run)


def test_a_tenant_untouched_by_the_plan_sees_no_change() -> None:
    view = tenant_view(_sharing_plan(), ["team-c"], ANOTHER_TENANT)
    assert view.plan.changes == () and view.plan.demands == ()
    assert SHARED_DEVICE not in repr(view.plan)
