"""Per-tenant reports: each tenant's report, CSV and Parquet name none of the other tenants, hostile names included."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dashboards.report.data import StoreReader
from dashboards.report.scope import ANOTHER_TENANT, Redactor, TenantScope, scope_reader
from dashboards.report.tenant_reports import (
    tenant_dir_name,
    write_per_tenant_reports,
    write_tenant_report,
)
from gpulens.core.errors import UserError
from tests.support.cli import assert_one_line_error, gpulens
from tests.support.report_store import EVIL_TENANT, build_store
from tests.support.tenant_names import OWNED, leaks

TENANTS = tuple(OWNED)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("store") / "gpulens.duckdb")


@pytest.fixture(scope="module")
def per_tenant(store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("showback")
    index, reports = write_per_tenant_reports(store, out)
    assert {r.tenant for r in reports} == set(TENANTS)
    return out, index


def _all_text(folder: Path) -> str:
    """Every file of a report folder as text; Parquet as the CSV of its rows."""
    parts = []
    for path in sorted(folder.iterdir()):
        if path.suffix == ".parquet":
            parts.append(pl.read_parquet(path).write_csv())
        else:
            parts.append(path.read_text(encoding="utf-8"))
    return "\n".join(parts)


@pytest.mark.parametrize("tenant", TENANTS)
def test_a_tenants_report_folder_names_no_other_tenant_pod_or_namespace(per_tenant: tuple[Path, Path], tenant: str) -> None:
    out, _ = per_tenant
    folder = out / tenant_dir_name(tenant)
    assert {p.name for p in folder.iterdir()} == {"index.html", "chargeback_focus.csv", "chargeback_focus.parquet",
                                                  "tenants.csv"}
    text = _all_text(folder)
    assert leaks(text, tenant) == []


@pytest.mark.parametrize("tenant", TENANTS)
def test_a_tenants_files_hold_only_its_own_rows(per_tenant: tuple[Path, Path], tenant: str) -> None:
    folder = per_tenant[0] / tenant_dir_name(tenant)
    assert pl.read_csv(folder / "tenants.csv")["tenant"].to_list() == [tenant]
    focus = pl.read_parquet(folder / "chargeback_focus.parquet")
    assert focus.height >= 1 and set(focus["x_Tenant"]) == {tenant}
    assert set(pl.read_csv(folder / "chargeback_focus.csv", infer_schema=False)["SubAccountName"]) == {tenant}


def test_a_co_tenant_on_a_shared_gpu_reads_as_another_tenant_and_still_counts(per_tenant: tuple[Path, Path]) -> None:
    page = (per_tenant[0] / "vision" / "index.html").read_text(encoding="utf-8")
    assert f"namespace of {ANOTHER_TENANT} has none" in page  # the device's risk term, its reason redacted
    assert "3 tenants on one GPU" in page  # the term still counts the co-tenants


def test_fleet_totals_become_the_tenants_share(per_tenant: tuple[Path, Path]) -> None:
    page = (per_tenant[0] / "nlp" / "index.html").read_text(encoding="utf-8")
    # nlp held one 1g slice of an H200 ($4/h x 1/7) for 6 hours, all idle: $3.43 is its whole bill
    assert "$3.43" in page
    assert "1 nodes, 1 GPUs, 1 devices" in page
    fleet = (per_tenant[0] / "vision" / "index.html").read_text(encoding="utf-8")
    assert "2 nodes, 2 GPUs, 2 devices" in fleet  # the unallocated A100 is not vision's


def test_the_platform_index_links_every_tenant_report_with_escaped_names(per_tenant: tuple[Path, Path]) -> None:
    out, index = per_tenant
    page = index.read_text(encoding="utf-8")
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    for tenant in TENANTS:
        assert f'href="{tenant_dir_name(tenant)}/index.html"' in page
        assert (out / tenant_dir_name(tenant) / "index.html").is_file()


@given(st.text(min_size=1, max_size=40))
def test_every_tenant_name_gets_a_folder_inside_out(tenant: str) -> None:
    name = tenant_dir_name(tenant)
    assert "/" not in name and "\\" not in name and name not in (".", "..") and name
    assert not name.startswith(".")


def test_names_that_are_not_plain_file_names_get_distinct_hashed_folders() -> None:
    assert tenant_dir_name("vision") == "vision"
    assert tenant_dir_name("../etc") != tenant_dir_name("..-etc")
    assert tenant_dir_name(EVIL_TENANT).startswith("script_alert_1_script-")


@given(own=st.text(min_size=1, max_size=8), other=st.text(min_size=1, max_size=8), filler=st.text(max_size=12))
def test_redaction_removes_every_other_name_and_keeps_the_viewers_own(own: str, other: str, filler: str) -> None:
    redactor = Redactor(frozenset({own}), frozenset({other}))
    text = f"{filler}{other} shares a GPU with {own}{filler}"
    shown = redactor.text(text)
    assert shown is not None
    if other not in own and other not in filler and other not in ANOTHER_TENANT and other not in " shares a GPU with ":
        assert other not in shown.replace(own, "")
    if other not in own:
        assert ANOTHER_TENANT in shown


def test_redaction_keeps_json_valid_and_catches_json_escaped_names() -> None:
    redactor = Redactor(frozenset({"vision"}), frozenset({EVIL_TENANT, "n"}))
    import json

    doc = json.dumps([{"reason": f"{EVIL_TENANT} on\nline two", "points": 1}])
    shown = redactor.json_text(doc)
    assert shown is not None
    assert json.loads(shown) == [{"reason": f"{ANOTHER_TENANT} o{ANOTHER_TENANT}\nli{ANOTHER_TENANT}e two",
                                  "points": 1}]


def test_the_scoped_reader_and_the_plain_reader_agree_on_the_tenants_own_figures(store: Path) -> None:
    plain = StoreReader.open(store)
    scoped = scope_reader(StoreReader.open(store), TenantScope.of(["vision"]))
    try:
        mine = plain.tenant_usage().filter(pl.col("tenant") == "vision")
        assert scoped.tenant_usage().equals(mine)
        assert scoped.workload_series("evil-ns", "Job", "evil").height == 0  # another tenant's workload: nothing
        assert scoped.recent_xids().height == 0  # the XID was on a GPU vision never held
    finally:
        plain.close()
        scoped.close()


def test_everything_in_scope_is_the_reader_itself(store: Path) -> None:
    reader = StoreReader.open(store)
    try:
        assert scope_reader(reader, TenantScope.everything()) is reader
    finally:
        reader.close()


def test_an_unknown_tenant_is_one_user_error(store: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--tenant 'nobody': no such tenant"):
        write_tenant_report(store, tmp_path / "out", "nobody")
    assert not (tmp_path / "out").exists()


def test_the_cli_writes_one_tenants_report(store: Path, tmp_path: Path) -> None:
    proc = gpulens("report", "--db", str(store), "--out", str(tmp_path / "r"), "--tenant", EVIL_TENANT)
    assert proc.returncode == 0, proc.stderr
    text = _all_text(tmp_path / "r")
    assert leaks(text, EVIL_TENANT) == []
    assert "<script>" not in (tmp_path / "r" / "index.html").read_text(encoding="utf-8")


def test_the_cli_refuses_tenant_and_per_tenant_together_in_one_line(store: Path, tmp_path: Path) -> None:
    proc = gpulens("report", "--db", str(store), "--out", str(tmp_path / "r"), "--tenant", "nlp", "--per-tenant")
    assert_one_line_error(proc, "--tenant and --per-tenant cannot be used together")
    assert not (tmp_path / "r").exists()
