"""Showback: one scoped report per tenant (``DIR/<tenant>/``) and an index of them for the platform team."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from analytics.tenant_energy import DEFAULT_GRID_GCO2_PER_KWH
from dashboards.report import html_parts as h
from dashboards.report.data import AnalysisMissing, StoreReader
from dashboards.report.scope import TenantDirectory, TenantScope
from dashboards.report.writer import INDEX, run_header_line, write_report
from gpulens.core.errors import UserError

_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def tenant_dir_name(tenant: str) -> str:
    """The folder of a tenant's report: its name when that is a plain file name (as Kubernetes names
    are), else a readable slug with a short hash of the name (so no name can escape DIR or collide)."""
    if _PLAIN_NAME.fullmatch(tenant) and tenant.lower() != INDEX:
        return tenant
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", tenant).strip("._-")[:40] or "tenant"
    return f"{slug}-{hashlib.sha256(tenant.encode('utf-8')).hexdigest()[:10]}"


@dataclass(frozen=True)
class TenantReport:
    """One written tenant report."""

    tenant: str
    index: Path


def known_tenants(db_path: str | Path) -> TenantDirectory:
    """The tenants of the store (and the names that identify each), read once."""
    reader = StoreReader.open(db_path)
    try:
        return TenantDirectory.read(reader)
    finally:
        reader.close()


def write_tenant_report(
    db_path: str | Path, out_dir: str | Path, tenant: str, *, now: datetime | None = None, run_id: str | None = None,
    grid_gco2_per_kwh: float = DEFAULT_GRID_GCO2_PER_KWH,
) -> Path:
    """The report of one tenant into ``out_dir``; an unknown tenant is a ``UserError``."""
    directory = known_tenants(db_path)
    if tenant not in directory.names:
        raise UserError(f"--tenant {tenant!r}: no such tenant in the store {db_path} (see `gpulens report --per-tenant`)")
    return write_report(db_path, out_dir, now=now, run_id=run_id, scope=TenantScope.of([tenant]), directory=directory,
                        grid_gco2_per_kwh=grid_gco2_per_kwh)


def write_per_tenant_reports(
    db_path: str | Path, out_dir: str | Path, *, now: datetime | None = None, run_id: str | None = None,
    grid_gco2_per_kwh: float = DEFAULT_GRID_GCO2_PER_KWH,
) -> tuple[Path, list[TenantReport]]:
    """``out_dir/<tenant>/index.html`` (with its CSV and Parquet) for every tenant, and ``out_dir/index.html``
    listing them with their figures for the platform team. Returns the index and the reports."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a directory")
    directory = known_tenants(db_path)
    names = [tenant_dir_name(t) for t in directory.tenants]
    clashes = {n for n in names if [m.lower() for m in names].count(n.lower()) > 1}
    if clashes:
        raise UserError(f"tenants whose report folders would clash (names differ only in case): {sorted(clashes)}")
    reports = [
        TenantReport(tenant, write_report(db_path, out / name, now=now, run_id=run_id,
                                          scope=TenantScope.of([tenant]), directory=directory,
                                          grid_gco2_per_kwh=grid_gco2_per_kwh))
        for tenant, name in zip(directory.tenants, names, strict=True)
    ]
    index = out / INDEX
    try:
        index.write_text(_platform_index(db_path, out, reports, now=now, run_id=run_id), encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write {index}: {exc.strerror or exc}") from exc
    return index, reports


def _platform_index(
    db_path: str | Path, out: Path, reports: list[TenantReport], *, now: datetime | None, run_id: str | None = None
) -> str:
    """The platform team's page: every tenant with its figures and a link to its report."""
    reader = StoreReader.open(db_path, run_id)
    try:
        run_header = run_header_line(reader)
        usage = _optional(reader.tenant_usage)
        billed = _optional(reader.chargeback_by_account)
    finally:
        reader.close()
    figures: dict[str, dict[str, object]] = {}
    if usage is not None:
        figures = {str(r["tenant"]): r for r in usage.iter_rows(named=True)}
    totals: dict[str, float] = {}
    if billed is not None:
        per = billed.filter(pl.col("tenant").is_not_null()).group_by("tenant").agg(pl.col("billed_usd").sum())
        totals = {str(t): float(v) for t, v in per.iter_rows()}
    rows = []
    for report in reports:
        row = figures.get(report.tenant, {})
        link = report.index.relative_to(out).as_posix()
        cells = [
            f'<td class="txt"><a href="{h.esc(link)}">{h.esc(report.tenant)}</a></td>',
            f'<td class="num">{h.esc(h.fmt_number(row.get("held_ge_hours")))}</td>',
            f'<td class="num">{h.esc(h.fmt_number(row.get("idle_ge_hours")))}</td>',
            f'<td class="num">{h.esc(h.fmt_percent(row.get("idle_share")))}</td>',
            f'<td class="num">{h.esc(h.fmt_usd(totals.get(report.tenant)))}</td>',
        ]
        rows.append(f"<tr>{''.join(cells)}</tr>")
    head = "".join(f'<th class="{c}">{h.esc(t)}</th>' for c, t in (
        ("txt", "tenant (its report)"), ("num", "held GE-h"), ("num", "idle GE-h"), ("num", "idle share"),
        ("num", "billed"),
    ))
    table = f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    intro = (
        "One folder per tenant, ready to send: its index.html, chargeback_focus.csv/.parquet and tenants.csv "
        "show only that tenant; a co-tenant on a shared GPU reads as 'another tenant'. This page names every "
        "tenant: keep it with the platform team."
    )
    generated = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
    body = h.section("tenants", f"{len(reports)} tenant reports", table, intro=intro)
    run_line, run_note = run_header
    return h.page("gpulens showback: reports per tenant", f"Store {Path(db_path).name} · generated {generated}",
                  run_line, run_note, [("tenants", "Tenants")], body)


def _optional(query: Callable[[], pl.DataFrame]) -> pl.DataFrame | None:
    try:
        return query()
    except AnalysisMissing:
        return None
