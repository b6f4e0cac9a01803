"""Objects gpulens writes validate: GPUQuotaRecommendation vs its CRD schema, Kueue and core shapes."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from analytics.recommend import RecommendationReport, RecommendSettings, recommend, write_dry_run
from tests.support.recommend_cluster import build_writer_store

ROOT = Path(__file__).resolve().parents[1]
CRD = yaml.safe_load((ROOT / "deploy/crd/gpuquotarecommendation.yaml").read_text())
KUEUE_GROUPS = json.loads((ROOT / "tests/fixtures/kueue_clusterqueue_resourcegroups.schema.json").read_text())
NOW = datetime(2026, 11, 9, 12, 0)
K8S = kubernetes_validate.latest_version()


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with unknown fields forbidden (the API server would silently prune them)."""
    out = copy.deepcopy(schema)
    if "properties" in out and out["properties"] != {}:
        out.setdefault("additionalProperties", False)
        out["properties"] = {k: (v if k == "metadata" else closed(v)) for k, v in out["properties"].items()}
    if "items" in out:
        out["items"] = closed(out["items"])
    return out


CR_SCHEMA = closed(CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> RecommendationReport:
    store = build_writer_store(tmp_path_factory.mktemp("schema") / "store.duckdb")
    return recommend(store, RecommendSettings(kueue_version="v1beta1"), clock=lambda: NOW)


def test_the_crd_is_a_valid_structural_custom_resource_definition() -> None:
    kubernetes_validate.validate(CRD, K8S, strict=True)
    version = CRD["spec"]["versions"][0]
    assert (CRD["spec"]["group"], version["name"], CRD["spec"]["names"]["kind"]) == (
        "gpulens.io", "v1alpha1", "GPUQuotaRecommendation")
    assert version["subresources"] == {"status": {}}


def test_recommendation_objects_validate_against_the_crd_schema(report: RecommendationReport) -> None:
    objects = report.recommendation_objects()
    assert {o["spec"]["targetRef"]["name"] for o in objects} == {"team-a", "team-b", "team-c", "gpu-quota"}
    for obj in objects:
        jsonschema.validate(obj, CR_SCHEMA)
        status = obj["status"]
        datetime.fromisoformat(status["generatedAt"])
        assert {c["type"] for c in status["conditions"]} == {"RecommendationProvided", "LowConfidence", "Applied"}


def test_an_object_breaking_the_schema_is_caught(report: RecommendationReport) -> None:
    bad = report.recommendation_objects()[0]
    bad["status"]["resources"][0]["action"] = "explode"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, CR_SCHEMA)


def test_dry_run_yaml_has_the_kueue_structure_and_valid_core_objects(
    report: RecommendationReport, tmp_path: Path
) -> None:
    files = {p.name: p for p in write_dry_run(report, tmp_path)}
    assert set(files) == {"clusterqueue-team-a.yaml", "clusterqueue-team-b.yaml", "resourcequota-ns-c.gpu-quota.yaml",
                          "gpuquotarecommendations.yaml"}  # team-c: low confidence, nothing to apply
    cq = yaml.safe_load(files["clusterqueue-team-a.yaml"].read_text())
    assert cq["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    jsonschema.validate(cq["spec"]["resourceGroups"], KUEUE_GROUPS)
    for group in cq["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
    rq = yaml.safe_load(files["resourcequota-ns-c.gpu-quota.yaml"].read_text())
    kubernetes_validate.validate(rq, K8S, strict=True)
    assert rq["spec"]["hard"] == {"requests.nvidia.com/gpu": "6"}
    for obj in yaml.safe_load_all(files["gpuquotarecommendations.yaml"].read_text()):
        jsonschema.validate(obj, CR_SCHEMA)


def test_rbac_manifests_are_valid_and_grant_nothing_cluster_wide_beyond_quotas() -> None:
    docs = list(yaml.safe_load_all((ROOT / "deploy/rbac/gpulens-recommender.yaml").read_text()))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S, strict=True)
    (cluster_role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    assert {(g, r) for rule in cluster_role["rules"] for g in rule["apiGroups"] for r in rule["resources"]} == {
        ("kueue.x-k8s.io", "clusterqueues"), ("", "resourcequotas")}
    (role,) = [d for d in docs if d["kind"] == "Role"]
    assert role["metadata"]["namespace"] == "gpulens"
