"""The Placement page under AppTest on an analysed simulated fleet: worse placements by tenant, stranded domains,
within the caller's tenant scope."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from streamlit.testing.v1 import AppTest

from dashboards.report.data import StoreReader
from dashboards.report.placement_data import placement_by_tenant, placement_run
from dashboards.streamlit import support
from dashboards.streamlit.access import ACCESS_FILE_ENV, GROUPS_HEADER_ENV, USER_HEADER_ENV
from dashboards.streamlit.launch import DB_ENV, PAGES
from tests.support.streamlit_app import fresh_caches  # noqa: F401 (an autouse fixture)

APP = Path(__file__).resolve().parents[1] / "dashboards" / "streamlit" / "app.py"
PAGE = "views/placement.py"


@pytest.fixture(scope="module")
def fleet(placement_store: Path) -> Path:
    """The session's analysed simulated day (tests.support.placement_fleet), read-only."""
    return placement_store


def _page(monkeypatch: pytest.MonkeyPatch, db: Path) -> AppTest:
    monkeypatch.setenv(DB_ENV, str(db))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page(PAGE)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_page_is_registered() -> None:
    assert (PAGE, "Placement") in {(p, t) for p, t, _ in PAGES}


def test_the_page_lists_the_workloads_placed_worse_by_tenant_and_the_stranded_domains(
    fleet: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    at = _page(monkeypatch, fleet)
    assert [t.value for t in at.title] == ["Placement by topology"]
    by_tenant, worse, stranded = (d.value for d in at.dataframe)
    [row] = by_tenant.to_dict("records")
    assert (row["tenant"], row["workloads"]) == ("foundation", 4)
    reader = StoreReader.open(fleet)
    try:  # the sum over the tenant's workloads, as the report shows it, never the largest one alone
        report = placement_by_tenant(reader, str(placement_run(reader))).filter(pl.col("tenant") == "foundation")
    finally:
        reader.close()
    affected = next(v for k, v in row.items() if k not in ("tenant", "workloads"))
    assert affected == pytest.approx(report["ge_hours_affected"][0]) and affected > 384.0
    assert set(worse["workload"]) == {"gpt-pretrain", "moe-finetune", "rl-reward", "bert-distill"}
    assert {m.label: m.value for m in at.metric} == {"GPUs stranded by topology": "4"}
    assert set(stranded[stranded["stranded_gpus"] > 0]["domain"]) == {
        "gpu-h200-train-1/numa-0", "gpu-h200-train-1/numa-1", "gpu-a100-pcie-0/nvlink-0", "gpu-a100-pcie-0/nvlink-2"}
    at.selectbox(key="placement_tenant").set_value("foundation").run()
    assert not at.exception
    assert set(at.dataframe[1].value["tenant"]) == {"foundation"}


def test_a_team_sees_only_its_own_workloads_and_no_fleet_domains(
    fleet: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_loopback: None,
) -> None:
    access = tmp_path / "access.yaml"
    access.write_text("admin_groups: [platform]\ngroups:\n  team-llm: [llm-research]\n", encoding="utf-8")
    monkeypatch.setattr(support, "request_headers",
                        lambda: {"X-Forwarded-Email": "a@example.com", "X-Forwarded-Groups": "team-llm"})
    monkeypatch.setenv(USER_HEADER_ENV, "X-Forwarded-Email")
    monkeypatch.setenv(GROUPS_HEADER_ENV, "X-Forwarded-Groups")
    monkeypatch.setenv(ACCESS_FILE_ENV, str(access))
    at = _page(monkeypatch, fleet)
    assert "Every multi-GPU workload sat in as few domains as its size allows." in [t.value for t in at.text]
    assert "No domain with free GPUs in this scope." in [t.value for t in at.text]
    assert not any("foundation" in str(d.value.to_csv()) for d in at.dataframe)
