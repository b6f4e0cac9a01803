"""FOCUS ``Tags`` carry the tenant's Kubernetes labels as a JSON object; the labels are tenant-controlled
strings, so they are data: valid JSON in the store, Parquet and CSV, never a spreadsheet formula."""

from __future__ import annotations

import csv
import json
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from gpulens.analytics.chargeback import write_focus
from gpulens.analytics.run import analyze
from gpulens.analytics.settings import AnalysisSettings
from tests.support.analytics_fleet import T0, Fleet

HOSTILE_VALUE = '=HYPERLINK("http://x","y"),\n"},{"gpulens/tenant":"someone-else'


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("tags")
    fleet = Fleet(tmp / "s.duckdb")
    fleet.node("n1")
    for gpu, tenant, namespace in (("GPU-1", "team-a", "a-train"), ("GPU-2", "team-a", "a-serve"),
                                   ("GPU-3", "team-b", "b-only")):
        fleet.gpu(gpu, "n1")
        fleet.samples(gpu, activity=0.5)
        fleet.alloc(gpu, tenant, namespace=namespace)
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


def test_a_tenants_lines_carry_the_labels_all_its_namespaces_share(run: tuple[Path, str]) -> None:
    tags = _tags(*run)
    for line in tags["team-a"]:
        assert line["cost-center"] == "cc-100" and line["team"] == "a"
        assert "stage" not in line  # the two namespaces differ: no single value is true of the tenant
        assert "k8s/namespace" not in line
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
