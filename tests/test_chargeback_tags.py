"""Chargeback by tenant, namespace and workload: a tenant's held lines are split by the namespace and workload
that held the time, and FOCUS ``Tags`` carry the namespace's Kubernetes labels as a JSON object; labels are
tenant-controlled strings, so they are data: valid JSON in the store, Parquet and CSV, never a formula."""

from __future__ import annotations

import csv
import json
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.chargeback import write_focus
from analytics.run import analyze
from analytics.settings import AnalysisSettings
from dashboards.report import write_report
from tests.support.analytics_fleet import T0, Fleet

HOSTILE_VALUE = '=HYPERLINK("http://x","y"),\n"},{"gpulens/tenant":"someone-else'


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("tags")
    fleet = Fleet(tmp / "s.duckdb")
    fleet.node("n1")
    for gpu, tenant, namespace, activity in (("GPU-1", "team-a", "a-train", 0.5), ("GPU-2", "team-a", "a-serve", 0.0),
                                             ("GPU-3", "team-b", "b-only", 0.5)):
        fleet.gpu(gpu, "n1")
        fleet.samples(gpu, activity=activity)
        fleet.alloc(gpu, tenant, namespace=namespace, pod=f"{namespace}-0")
    fleet.con.execute("UPDATE allocation_claims SET workload_kind = 'Job', workload_name = namespace || '-job'")
    fleet.gpu("GPU-free", "n1")  # nobody holds it: the fleet's own __unallocated__ lines
    fleet.samples("GPU-free", activity=0.0)
    labels = {
        "a-train": {"cost-center": "cc-100", "team": "a", "stage": "train"},
        "a-serve": {"cost-center": "cc-100", "team": "a", "stage": "serve"},
        "b-only": {"cost-center": HOSTILE_VALUE, "gpulens/tenant": "forged"},
    }
    tenants = {"a-train": "team-a", "a-serve": "team-a", "b-only": "team-b"}
    for namespace, values in labels.items():
        fleet.con.execute(
            "INSERT INTO namespace_snapshots (ts, namespace, tenant, labels, source) VALUES (?, ?, ?, ?, 'test')",
            [T0, namespace, tenants[namespace], json.dumps(values)],
        )
    fleet.close()
    settings = AnalysisSettings.model_validate({"window_seconds": 3600, "end": T0 + timedelta(hours=1)})
    return tmp / "s.duckdb", analyze(tmp / "s.duckdb", settings).run_id


def _tags(db: Path, run_id: str) -> dict[str | None, list[dict[str, str]]]:
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT x_Tenant, CAST(Tags AS VARCHAR) FROM chargeback WHERE run_id = ?", [run_id]).fetchall()
    out: dict[str | None, list[dict[str, str]]] = {}
    for tenant, tags in rows:
        out.setdefault(tenant, []).append(json.loads(tags))
    return out


def test_a_tenants_held_time_is_charged_per_namespace_and_workload_that_held_it(run: tuple[Path, str]) -> None:
    db, run_id = run
    with duckdb.connect(str(db), read_only=True) as con:
        lines = con.execute(
            "SELECT x_Namespace, x_WorkloadKind, x_Workload, x_CostState, sum(x_GeHours) FROM chargeback "
            "WHERE run_id = ? AND x_Tenant = 'team-a' GROUP BY ALL ORDER BY ALL", [run_id]).fetchall()
        held = con.execute("SELECT sum(ge_hours) FROM idle_capacity WHERE run_id = ? AND tenant = 'team-a'",
                           [run_id]).fetchone()
    assert [(ns, kind, w, state) for ns, kind, w, state, _ in lines] == [
        ("a-serve", "Job", "a-serve-job", "idle"), ("a-train", "Job", "a-train-job", "active")]
    assert [h for *_, h in lines] == pytest.approx([1.0, 1.0])
    assert held is not None and sum(h for *_, h in lines) == pytest.approx(held[0])  # the tenant's total is kept


def test_each_line_carries_its_namespaces_labels_namespace_and_workload_as_tags(run: tuple[Path, str]) -> None:
    tags = _tags(*run)
    stages = {line["k8s/namespace"]: line["stage"] for line in tags["team-a"]}
    assert stages == {"a-train": "train", "a-serve": "serve"}
    for line in tags["team-a"]:
        assert line["cost-center"] == "cc-100" and line["team"] == "a"
        assert line["k8s/workload-kind"] == "Job" and line["k8s/workload"] == f"{line['k8s/namespace']}-job"
        assert line["gpulens/tenant"] == "team-a"


def test_a_label_is_data_it_never_forges_a_gpulens_tag_or_breaks_the_json(run: tuple[Path, str]) -> None:
    tags = _tags(*run)
    for line in tags["team-b"]:
        assert line["cost-center"] == HOSTILE_VALUE
        assert line["gpulens/tenant"] == "team-b"
        assert line["k8s/namespace"] == "b-only"
    for line in tags[None]:  # the fleet's own lines carry no tenant's labels
        assert set(line) == {"gpulens/tenant", "gpulens/state", "gpulens/gpu-model"}


def test_the_focus_csv_keeps_tags_a_json_object_a_spreadsheet_reads_as_text(run: tuple[Path, str], tmp_path: Path) -> None:
    db, run_id = run
    with duckdb.connect(str(db), read_only=True) as con:
        csv_path, _ = write_focus(con, run_id, tmp_path)
    with csv_path.open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    b_rows = [r for r in rows if r["x_Tenant"] == "team-b"]
    assert b_rows
    for row in b_rows:
        assert row["Tags"].startswith("{")
        assert json.loads(row["Tags"])["cost-center"] == HOSTILE_VALUE


def test_the_report_lists_the_workloads_charged_most_with_their_namespace(run: tuple[Path, str], tmp_path: Path) -> None:
    db, _ = run
    page = write_report(db, tmp_path / "report").read_text(encoding="utf-8")
    section = page[page.index('<section id="chargeback">'):]
    section = section[:section.index("</section>")]
    assert "By namespace and workload" in section
    for namespace in ("a-train", "a-serve", "b-only"):
        assert f"<td class=\"txt\">{namespace}-job</td>" in section or f">{namespace}-job<" in section
