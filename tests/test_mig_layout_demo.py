"""End to end on the demo store: its shrink recommendations come with a valid MIG layout plan and patches."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import jsonschema
import kubernetes_validate
import pytest
import yaml

from analytics.miglayout.run import layout_from_store
from gpulens.core.mig_catalog import model_by_name, place_layout
from tests.support.demo_run import DemoRun
from tests.test_mig_layout_files import FIXTURES, LATEST, strategic_merge

pytestmark = pytest.mark.slow


@pytest.fixture
def demo(demo_run: DemoRun) -> Path:
    """The session's demo folder (read-only), once the demo has printed its MIG layout plan."""
    assert demo_run.proc.returncode == 0, demo_run.proc.stderr[-3000:]
    assert "MIG layout plan" in demo_run.proc.stdout
    return demo_run.out


def test_every_confident_demo_shrink_to_a_mig_profile_is_planned_with_a_patch(demo: Path) -> None:
    with duckdb.connect(str(demo / "gpulens.duckdb"), read_only=True) as con:
        shrinks = con.execute(
            "SELECT target_namespace || '/' || target_kind || '/' || target_name FROM recommendations "
            "WHERE scope = 'workload' AND action = 'shrink' AND confidence_label <> 'low' "
            "AND recommended_profile <> 'gpu'").fetchall()
        run = layout_from_store(con)
    assert shrinks, "the demo fleet has confident MIG shrinks"
    assert run is not None
    planned = {d.workload for d in run.plan.demands}
    assert {w for (w,) in shrinks} <= planned
    served = {w for c in run.plan.changes for w, _ in c.serves} | {r.workload for r in run.plan.reused}
    for d in run.plan.demands:
        assert d.workload in served or d.workload in run.plan.unplaced_workloads
    for c in run.plan.changes:
        assert place_layout(model_by_name(c.gpu.model), c.layout) is not None
    files = {p.name for p in (demo / "recommendations" / "workloads").glob("*.yaml")}
    for d in run.plan.demands:
        if d.workload in served:
            assert f"{d.kind}-{d.namespace}-{d.name}.yaml".lower() in files


def test_the_demo_writes_a_valid_mig_parted_config_and_valid_patches(demo: Path) -> None:
    config = yaml.safe_load((demo / "recommendations" / "mig" / "mig-parted.yaml").read_text())
    jsonschema.validate(config, json.loads((FIXTURES / "mig_parted_config.schema.json").read_text()))
    for path in (demo / "recommendations" / "workloads").glob("*.yaml"):
        patch = yaml.safe_load(path.read_text())
        if "spec" not in patch:
            continue  # a custom resource: a manifest change, not a kubectl patch
        kind = {"statefulset": "StatefulSet", "deployment": "Deployment"}.get(path.name.split("-")[0])
        if kind is None:
            continue
        container = patch["spec"]["template"]["spec"]["containers"][0]["name"]
        old = next(k for k, v in patch["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].items()
                   if v is None)
        base = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "x", "namespace": "y"},
                "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": container, "image": "i", "resources": {"limits": {old: "1"}}}]}}}}
        if kind == "StatefulSet":
            base["spec"]["serviceName"] = "x"
        kubernetes_validate.validate(strategic_merge(base, patch), LATEST, strict=True)


def test_the_report_has_a_mig_layout_section(demo: Path) -> None:
    html = (demo / "report" / "index.html").read_text()
    assert 'id="mig-layout"' in html and "GE-hours freed over the window" in html
