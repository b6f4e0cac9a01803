"""`gpulens recommend --target workloads`: the mig-parted config, Node labels and workload patches, checked
against mig-parted's config structure and the Kubernetes OpenAPI (kubernetes-validate)."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.support.recommend_cluster import WEEK
from tests.support.recommend_store import StoreBuilder, gib

FIXTURES = Path(__file__).parent / "fixtures"
LATEST = kubernetes_validate.latest_version()
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


def chat_fleet(path: Path) -> Path:
    """team-a serves a chat model from 4 whole H200s on node-a, using a few GiB and almost no compute."""
    s = StoreBuilder(path)
    for g in range(4):
        s.device(f"g{g}", "H200", node="node-a")
    s.device("busy", "H200", node="node-b")
    pods = {f"chat-{g}": [f"g{g}"] for g in range(4)}
    s.workload("team-a", "Deployment", "chat", pods, samples=WEEK, tenant="team-a",
               activity=lambda i: 0.3 if i % 50 == 0 else 0.01, memory=lambda i: gib(9) + (i % 5) * gib(0.1))
    s.workload("team-b", "Job", "train", {"train-0": ["busy"]}, samples=WEEK, tenant="team-b",
               activity=lambda i: 0.95, memory=lambda i: gib(120))
    return s.save()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpulens.cli", *args], capture_output=True, text=True, timeout=300)


def strategic_merge(base: Any, patch: Any) -> Any:
    """Enough of a strategic merge patch for pod templates: maps merge, null deletes, named lists merge by name."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = strategic_merge(out.get(key, {} if isinstance(value, dict) else None), value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and all(isinstance(x, dict) and "name" in x for x in patch):
        out_list = [dict(x) for x in base]
        for item in patch:
            match = next((i for i, x in enumerate(out_list) if x.get("name") == item["name"]), None)
            if match is None:
                out_list.append(strategic_merge({}, item))
            else:
                out_list[match] = strategic_merge(out_list[match], item)
        return out_list
    return copy.deepcopy(patch)


def deployment(name: str, namespace: str, container: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 4, "selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": container, "image": "vllm/vllm-openai:v0.6.0",
                                     "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "32Gi"}}}]}}},
    }


@pytest.fixture(scope="module")
def device_plugin_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    tmp = tmp_path_factory.mktemp("layout")
    db = chat_fleet(tmp / "s.duckdb")
    proc = run_cli("recommend", "--db", str(db), "--target", "workloads", "--out", str(tmp / "out"))
    return tmp / "out", proc


def test_the_plan_is_summarised_and_written_as_files(device_plugin_files: tuple[Path, Any]) -> None:
    out, proc = device_plugin_files
    assert proc.returncode == 0, proc.stderr
    assert "1 GPU(s) on 1 node(s) to repartition" in proc.stdout
    assert "frees 3 whole GPU(s)" in proc.stdout
    assert "node-a GPU" in proc.stdout and "whole GPU -> 1g.18gb+1g.18gb" in proc.stdout
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "mig/README.md", "mig/mig-parted.rollback.yaml", "mig/mig-parted.yaml", "mig/node-labels.rollback.yaml",
        "mig/node-labels.yaml", "workloads/deployment-team-a-chat.rollback.yaml", "workloads/deployment-team-a-chat.yaml"]


def test_every_layout_and_workload_file_has_its_rollback_with_todays_layout_and_resources(
    device_plugin_files: tuple[Path, Any],
) -> None:
    out, _ = device_plugin_files
    config = yaml.safe_load((out / "mig" / "mig-parted.rollback.yaml").read_text())
    jsonschema.validate(config, json.loads((FIXTURES / "mig_parted_config.schema.json").read_text()))
    (name, entries), = config["mig-configs"].items()
    assert entries == [{"devices": "all", "mig-enabled": False}]  # node-a's four GPUs are whole today
    (node,) = list(yaml.safe_load_all((out / "mig" / "node-labels.rollback.yaml").read_text()))
    assert node["metadata"] == {"name": "node-a", "labels": {"nvidia.com/mig.config": name}}
    today = deployment("chat", "team-a", "main")
    forward = strategic_merge(today, yaml.safe_load((out / "workloads" / "deployment-team-a-chat.yaml").read_text()))
    back_text = (out / "workloads" / "deployment-team-a-chat.rollback.yaml").read_text()
    assert "kubectl patch deployment chat -n team-a --type strategic" in back_text
    back = strategic_merge(forward, yaml.safe_load(back_text))
    kubernetes_validate.validate(back, LATEST, strict=True)
    resources = back["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["limits"] == today["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert "rollback" in (out / "mig" / "README.md").read_text()


def test_the_mig_parted_config_has_the_operators_structure_and_a_layout_valid_for_the_gpu(
    device_plugin_files: tuple[Path, Any],
) -> None:
    out, _ = device_plugin_files
    config = yaml.safe_load((out / "mig" / "mig-parted.yaml").read_text())
    jsonschema.validate(config, json.loads((FIXTURES / "mig_parted_config.schema.json").read_text()))
    (name, entries), = config["mig-configs"].items()
    assert LABEL_VALUE.match(name)
    enabled = [e for e in entries if e["mig-enabled"]]
    assert [e["mig-devices"] for e in enabled] == [{"1g.18gb": 7}]
    assert sum(len(e["devices"]) for e in entries) == 4  # every GPU of node-a is listed; the other 3 stay whole
    (node,) = list(yaml.safe_load_all((out / "mig" / "node-labels.yaml").read_text()))
    assert node["metadata"] == {"name": "node-a", "labels": {"nvidia.com/mig.config": name}}
    kubernetes_validate.validate(node, LATEST, strict=True)
    readme = (out / "mig" / "README.md").read_text()
    assert readme.index("drain") < readme.index("nvidia.com/mig.config=") < readme.index("mig.config.state")


def test_the_workload_patch_swaps_the_whole_gpu_for_a_mig_slice_and_the_patched_object_is_valid(
    device_plugin_files: tuple[Path, Any],
) -> None:
    out, _ = device_plugin_files
    text = (out / "workloads" / "deployment-team-a-chat.yaml").read_text()
    assert "kubectl patch deployment chat -n team-a --type strategic" in text
    patched = strategic_merge(deployment("chat", "team-a", "main"), yaml.safe_load(text))
    kubernetes_validate.validate(patched, LATEST, strict=True)
    limits = patched["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"memory": "32Gi", "nvidia.com/mig-1g.18gb": "1"}


def test_with_dra_a_resource_claim_template_selects_the_profile_and_the_pod_template_references_it(
    tmp_path: Path,
) -> None:
    db = chat_fleet(tmp_path / "s.duckdb")
    proc = run_cli("recommend", "--db", str(db), "--target", "workloads", "--dra", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    wl = tmp_path / "out" / "workloads"
    claim = yaml.safe_load((wl / "deployment-team-a-chat.resourceclaimtemplate.yaml").read_text())
    kubernetes_validate.validate(claim, LATEST, strict=True)
    (request,) = claim["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "mig.nvidia.com"
    assert request["exactly"]["selectors"][0]["cel"]["expression"] == (
        "device.attributes['gpu.nvidia.com'].profile == '1g.18gb'")
    patched = strategic_merge(deployment("chat", "team-a", "main"), yaml.safe_load((wl / "deployment-team-a-chat.yaml").read_text()))
    kubernetes_validate.validate(patched, LATEST, strict=True)
    pod = patched["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "mig", "resourceClaimTemplateName": claim["metadata"]["name"]}]
    assert pod["containers"][0]["resources"] == {"limits": {"memory": "32Gi"}, "requests": {}, "claims": [{"name": "mig"}]}


def test_workload_files_are_never_applied_and_dra_needs_the_workloads_target(tmp_path: Path) -> None:
    db = chat_fleet(tmp_path / "s.duckdb")
    applied = run_cli("recommend", "--db", str(db), "--target", "workloads", "--apply", "--out", str(tmp_path / "o"))
    assert applied.returncode == 2 and applied.stderr.startswith("gpulens: error: --apply:")
    assert "Traceback" not in applied.stderr and not (tmp_path / "o").exists()
    dra = run_cli("recommend", "--db", str(db), "--dra", "--out", str(tmp_path / "o"))
    assert dra.returncode == 2 and "--dra applies to --target workloads" in dra.stderr
