"""The kustomizations in deploy/: valid Kubernetes objects, least privilege, wired to each other and the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from dashboards.grafana.generate import DASHBOARDS
from exporter.kubelet.dra import ResourceSliceDirectory
from gpulens.cli import app
from gpulens.core.kube_api import KubernetesClient
from gpulens.core.tenancy.resolver import TenantResolver
from tests.fakes.kubernetes_api import FakeKubernetesApi, RecordedRequest
from tests.support.crd_schemas import validate_custom
from tests.support.kustomize import (
    GUIDE,
    IMAGE_NAME,
    containers,
    gpulens_commands,
    pod_spec,
    render,
    shipped_kustomizations,
    write_guide_overlay,
)
from tests.support.rbac import WRITE_VERBS, granted, is_discovery, permission

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "deploy" / "base"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
IMAGE = f"{IMAGE_NAME}:{VERSION}"
CLUSTER_SCOPED = frozenset(
    {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume", "StorageClass"}
)
CUSTOM_KINDS = frozenset({"ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"})
WORKLOAD_KINDS = frozenset({"DaemonSet", "Deployment", "CronJob"})



def claimed_kubernetes_versions() -> tuple[str, str]:
    """The oldest Kubernetes docs/install.md says the manifests run on, and the newest schema known."""
    claim = re.search(r"Kubernetes (\d+\.\d+) or newer", GUIDE.read_text(encoding="utf-8"))
    assert claim is not None, "docs/install.md no longer says which Kubernetes it needs"
    return f"{claim[1]}.0", kubernetes_validate.latest_version()


KUBERNETES_VERSIONS = claimed_kubernetes_versions()


@cache
def rendered() -> tuple[dict[str, Any], ...]:
    """deploy/base as ``kubectl kustomize`` renders it."""
    return tuple(render(BASE))


def one(kind: str, name: str) -> dict[str, Any]:
    found = [obj for obj in rendered() if obj["kind"] == kind and obj["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def test_the_base_has_every_component_of_an_install() -> None:
    kinds = {(obj["kind"], obj["metadata"]["name"]) for obj in rendered()}
    assert {
        ("Namespace", "gpulens"),
        ("DaemonSet", "gpulens-exporter"),
        ("Service", "gpulens-exporter"),
        ("ServiceMonitor", "gpulens-exporter"),
        ("PrometheusRule", "gpulens"),
        ("CronJob", "gpulens-collect"),
        ("CronJob", "gpulens-analyze"),
        ("Deployment", "gpulens-dashboard"),
        ("Service", "gpulens-dashboard"),
        ("ClusterRole", "gpulens-exporter"),
        ("CustomResourceDefinition", "gpuquotarecommendations.gpulens.io"),
        ("ServiceAccount", "gpulens-recommender"),
        ("Deployment", "gpulens-remediation"),
        ("AlertmanagerConfig", "gpulens-remediation"),
    } <= kinds


def every_rendering(where: Path) -> dict[str, list[dict[str, Any]]]:
    """Each shipped kustomization and the guide's overlay (written under ``where``), rendered by kubectl."""
    renderings = {str(path.relative_to(ROOT)): list(rendered()) if path == BASE else render(path)
                  for path in shipped_kustomizations()}
    renderings["docs/install.md overlay"] = render(write_guide_overlay(where))
    return renderings


@pytest.fixture(scope="module")
def renderings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    return every_rendering(tmp_path_factory.mktemp("guide"))


def test_kubectl_renders_the_base_every_overlay_and_the_guides_overlay(
        renderings: dict[str, list[dict[str, Any]]]) -> None:
    assert {"deploy/base", "deploy/overlays/oauth2-proxy", "docs/install.md overlay"} <= renderings.keys()
    base = {(obj["kind"], obj["metadata"]["name"]) for obj in renderings["deploy/base"]}
    for name, objects in renderings.items():
        assert base <= {(obj["kind"], obj["metadata"]["name"]) for obj in objects}, name


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_core_object_validates_against_the_oldest_and_newest_kubernetes_the_guide_claims(
        version: str, renderings: dict[str, list[dict[str, Any]]]) -> None:
    distinct: dict[str, tuple[str, dict[str, Any]]] = {}  # the overlays repeat most objects of the base: each distinct object is checked once
    for name, objects in renderings.items():
        for obj in objects:
            if obj["kind"] not in CUSTOM_KINDS:
                distinct.setdefault(json.dumps(obj, sort_keys=True), (name, obj))
    for name, obj in distinct.values():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{name}: {obj['kind']}/{obj['metadata']['name']} on Kubernetes {version}: {exc}")
    assert len(distinct) >= 25


def test_every_custom_resource_validates_against_its_upstream_crd_schema(
        renderings: dict[str, list[dict[str, Any]]]) -> None:
    """Any other kind fails the Kubernetes schema test (no schema found): its CRD's schema belongs here."""
    checked = 0
    for objects in renderings.values():
        for obj in objects:
            if obj["kind"] in CUSTOM_KINDS:
                validate_custom(obj)
                checked += 1
    assert checked == 4 * len(renderings), "two ServiceMonitors, the PrometheusRule, the AlertmanagerConfig"


def test_the_schema_checks_reject_a_misspelt_field() -> None:
    daemonset = yaml.safe_load(yaml.safe_dump(one("DaemonSet", "gpulens-exporter")))
    daemonset["spec"]["template"]["spec"]["nodeSelectr"] = {"x": "y"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, KUBERNETES_VERSIONS[-1], strict=True)
    monitor = yaml.safe_load(yaml.safe_dump(one("ServiceMonitor", "gpulens-exporter")))
    monitor["spec"]["endpoints"][0]["honourLabels"] = True
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(monitor)


def test_the_crd_schema_check_rejects_a_bad_duration_and_a_rule_without_expr() -> None:
    rule = yaml.safe_load(yaml.safe_dump(one("PrometheusRule", "gpulens")))
    rule["spec"]["groups"][0]["interval"] = "1 minute"
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(rule)
    rule = yaml.safe_load(yaml.safe_dump(one("PrometheusRule", "gpulens")))
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(rule)


def test_the_image_tag_is_written_once_in_the_kustomization_not_in_each_workload() -> None:
    tagged = [f"{path.name}:{number}" for path in sorted(BASE.glob("*.yaml")) if path.name != "kustomization.yaml"
              for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
              if f"{IMAGE_NAME}:" in line]
    assert tagged == []


def test_the_base_runs_the_image_and_carries_the_version_of_the_package() -> None:
    """pyproject.toml's version is the one place: the base's image tag and version label must follow it."""
    images = {c["image"] for obj in rendered() for c in containers(obj)}
    assert images == {IMAGE}
    assert {obj["metadata"]["labels"]["app.kubernetes.io/version"] for obj in rendered()} == {VERSION}


def test_the_exporter_runs_on_gpu_nodes_with_the_kubelet_socket_read_only_and_its_node_name() -> None:
    daemonset = one("DaemonSet", "gpulens-exporter")
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    (container,) = spec["containers"]
    assert container["image"] == IMAGE
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    socket_mount = mounts["/var/lib/kubelet/pod-resources"]
    assert socket_mount["readOnly"] is True
    assert volumes[socket_mount["name"]]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    env = {item["name"]: item for item in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "--backend=nvml" in container["args"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    port = next(p["containerPort"] for p in container["ports"] if p["name"] == container["livenessProbe"]["httpGet"]["port"])
    assert f"--listen=0.0.0.0:{port}" in container["args"]


def test_every_container_drops_all_capabilities_has_a_read_only_root_and_resource_limits() -> None:
    for obj in rendered():
        for container in containers(obj):
            where = f"{obj['kind']}/{obj['metadata']['name']}:{container['name']}"
            context = container["securityContext"]
            assert context["capabilities"]["drop"] == ["ALL"], where
            assert "add" not in context["capabilities"], where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context.get("privileged", False) is False, where
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(container["resources"][kind]), where


def exporter_api_traffic() -> list[RecordedRequest]:
    """Every request tenant resolution and DRA resolution make, with each rule and owner kind exercised."""
    node = "gpu-node-1"
    with FakeKubernetesApi() as api:
        api.add_pod("a", "labelled", node, labels={"gpulens.io/tenant": "vision"})
        api.add_pod("b", "queued", node, labels={"kueue.x-k8s.io/queue-name": "lq"})
        api.objects["/apis/kueue.x-k8s.io/v1beta1/namespaces/b/localqueues/lq"] = {"spec": {"clusterQueue": "cq"}}
        api.add_pod("c", "web-7d9-x", node, owner=("ReplicaSet", "web-7d9"))
        api.add_owner("/apis/apps/v1/namespaces/c/replicasets/web-7d9", ("Deployment", "web"))
        api.add_pod("c", "train-0", node, owner=("Job", "train-0"))
        api.add_owner("/apis/batch/v1/namespaces/c/jobs/train-0", ("JobSet", "train"))
        api.add_namespace("c", {"capsule.clastix.io/tenant": "oil"})
        client = KubernetesClient(api.url)
        resolver = TenantResolver(client, node, clock=lambda: 0.0)
        infos = [resolver.resolve(ns, pod) for ns, pod in
                 (("a", "labelled"), ("b", "queued"), ("c", "web-7d9-x"), ("c", "train-0"))]
        assert [(i.rule, i.workload_kind) for i in infos] == [
            ("pod_label", "Pod"), ("kueue", "Pod"), ("capsule", "Deployment"), ("capsule", "JobSet")]
        slices = ResourceSliceDirectory(client, node)
        slices.uuid("gpu.nvidia.com", node, "gpu-0")
        slices.claim_result("c", "train-0-gpu", "gpu.nvidia.com", node, "gpu-0")
        client.close()
    return api.requests


def test_the_exporter_rbac_is_read_only_and_exactly_what_tenant_and_dra_resolution_request() -> None:
    needed = {(p.api_group, p.resource, p.verb) for p in map(permission, exporter_api_traffic())}
    assert ("resource.k8s.io", "resourceslices", "list") in needed and ("", "pods", "list") in needed
    role = one("ClusterRole", "gpulens-exporter")
    assert granted(role["rules"]) == needed
    assert {verb for _, _, verb in needed} & WRITE_VERBS == set()
    binding = one("ClusterRoleBinding", "gpulens-exporter")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpulens-exporter", "namespace": "gpulens"}]


def collector_api_traffic() -> list[RecordedRequest]:
    """Every request ``gpulens collect --kubernetes`` makes, with both owner kinds of GPU pods looked up."""
    from collector.inventory import snapshot_frames

    gpu = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    with FakeKubernetesApi() as api:
        for path in ("/api/v1/namespaces", "/api/v1/nodes", "/api/v1/resourcequotas",
                     "/apis/networking.k8s.io/v1/networkpolicies", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
                     "/apis/kueue.x-k8s.io/v1beta2/localqueues"):
            api.objects[path] = {"kind": "List", "items": []}
        api.serve_api_group("kueue.x-k8s.io", {"v1beta2": ["clusterqueues", "localqueues", "resourceflavors"]})
        api.objects["/api/v1/pods"] = {"kind": "List", "items": [
            {"metadata": {"namespace": "c", "name": f"p-{kind}", "ownerReferences": [
                {"kind": kind, "name": "owner", "controller": True}]}, "spec": gpu}
            for kind in ("ReplicaSet", "Job")]}
        with KubernetesClient(api.url) as client:
            snapshot_frames(client, 0.0)
    return api.requests


def test_the_collector_rbac_grants_exactly_the_requests_it_makes_and_never_writes() -> None:
    needed = {(p.api_group, p.resource, p.verb)
              for p in map(permission, (r for r in collector_api_traffic() if not is_discovery(r.path)))}
    assert ("kueue.x-k8s.io", "clusterqueues", "list") in needed and ("", "nodes", "list") in needed
    role = one("ClusterRole", "gpulens-collector")
    assert needed == granted(role["rules"])
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert verbs & WRITE_VERBS == set()


def test_pods_use_service_accounts_and_claims_that_the_base_creates() -> None:
    accounts = {obj["metadata"]["name"] for obj in rendered() if obj["kind"] == "ServiceAccount"}
    claims = {obj["metadata"]["name"] for obj in rendered() if obj["kind"] == "PersistentVolumeClaim"}
    for obj in rendered():
        spec = pod_spec(obj)
        if spec is None:
            continue
        if spec.get("automountServiceAccountToken") is not False:
            assert spec.get("serviceAccountName") in accounts, obj["metadata"]["name"]
        for volume in spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims


def test_the_servicemonitor_selects_the_exporter_service_and_keeps_the_workload_labels() -> None:
    monitor = one("ServiceMonitor", "gpulens-exporter")
    service = one("Service", "gpulens-exporter")
    daemonset = one("DaemonSet", "gpulens-exporter")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= daemonset["spec"]["template"]["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True


def test_the_prometheusrule_is_labelled_for_kube_prometheus_stack_and_well_formed() -> None:
    rule = one("PrometheusRule", "gpulens")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["namespace"] == "gpulens"
    for group in rule["spec"]["groups"]:
        assert group["name"] and group["rules"]
        for item in group["rules"]:
            assert ("record" in item) != ("alert" in item)
            assert isinstance(item["expr"], str) and item["expr"].strip()


def test_the_dashboard_configmaps_carry_the_grafana_sidecar_label() -> None:
    maps = [obj for obj in rendered() if obj["kind"] == "ConfigMap" and obj["metadata"]["name"].startswith("grafana-")]
    assert len(maps) == len(DASHBOARDS)
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert all(key.endswith(".json") for key in config_map["data"])


def parses(args: tuple[str, ...]) -> tuple[bool, str]:
    """Whether ``gpulens ARGS --help`` exits 0: every flag name exists and takes a value only if it should."""
    result = CliRunner().invoke(app, [*args, "--help"])
    return result.exit_code == 0, result.output


def test_every_gpulens_container_command_line_parses_with_help_appended(
        renderings: dict[str, list[dict[str, Any]]]) -> None:
    """A renamed flag breaks this test, not the cluster (the image test runs the same lines in the image)."""
    lines: dict[tuple[str, ...], str] = {}  # each distinct command line once, with where it runs first
    for name, objects in renderings.items():
        image_name = "registry.example.com/platform/gpulens" if name == "docs/install.md overlay" else IMAGE_NAME
        for command in gpulens_commands(objects, image_name):
            lines.setdefault(command.args, f"{name}: {command.where}")
    assert len(lines) >= 8
    for args, where in lines.items():
        ok, output = parses(args)
        assert ok, f"{where}: gpulens {' '.join(args)} --help: {output}"


def test_the_command_line_check_fails_on_a_renamed_flag_or_a_flag_given_a_value() -> None:
    assert parses(("analyze", "--db=/data/gpulens.duckdb", "--window=14d"))[0]
    assert not parses(("analyze", "--database=/data/gpulens.duckdb"))[0]
    assert not parses(("exporter", "--help-me"))[0]
    assert not parses(("recommend", "--apply=yes"))[0]


def test_jobs_that_share_the_store_run_next_to_the_dashboard_that_mounts_it() -> None:
    dashboard_labels = one("Deployment", "gpulens-dashboard")["spec"]["template"]["metadata"]["labels"]
    for name in ("gpulens-collect", "gpulens-analyze"):
        spec = pod_spec(one("CronJob", name))
        assert spec is not None
        (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["topologyKey"] == "kubernetes.io/hostname"
        assert term["labelSelector"]["matchLabels"].items() <= dashboard_labels.items()
    assert one("CronJob", "gpulens-collect")["spec"]["concurrencyPolicy"] == "Forbid"


def test_the_overlay_of_the_install_guide_changes_what_it_says(renderings: dict[str, list[dict[str, Any]]]) -> None:
    objects = {(obj["kind"], obj["metadata"]["name"]): obj for obj in renderings["docs/install.md overlay"]}
    assert objects[("ServiceMonitor", "gpulens-exporter")]["metadata"]["labels"]["release"] == "monitoring"
    assert objects[("PrometheusRule", "gpulens")]["metadata"]["labels"]["release"] == "monitoring"
    exporter = objects[("DaemonSet", "gpulens-exporter")]["spec"]["template"]["spec"]
    assert exporter["runtimeClassName"] == "nvidia"
    assert exporter["containers"][0]["image"] == f"registry.example.com/platform/gpulens:{VERSION}"
    collect = objects[("CronJob", "gpulens-collect")]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    prometheus_args = [arg for arg in collect["initContainers"][0]["args"] if arg.startswith("--prometheus=")]
    assert prometheus_args == ["--prometheus=http://monitoring-kube-prometheus-prometheus.monitoring.svc:9090"]


def make_release_manifests(*variables: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "release-manifests", *variables],
                          capture_output=True, text=True, timeout=60)


def test_make_release_manifests_writes_an_overlay_that_runs_the_release_everywhere(tmp_path: Path) -> None:
    out = tmp_path / "release"
    made = make_release_manifests("IMAGE=registry.example.com:5000/team/gpulens", "TAG=9.8.7", f"OUT={out}")
    assert made.returncode == 0, made.stderr
    objects = render(out)
    assert {(o["kind"], o["metadata"]["name"]) for o in objects} == {(o["kind"], o["metadata"]["name"]) for o in rendered()}
    images = {c["image"] for obj in objects for c in containers(obj)}
    assert images == {"registry.example.com:5000/team/gpulens:9.8.7"}
    assert {obj["metadata"]["labels"]["app.kubernetes.io/version"] for obj in objects} == {"9.8.7"}


def test_make_release_manifests_tags_the_package_version_unless_told(tmp_path: Path) -> None:
    made = make_release_manifests("IMAGE=registry.example.com/team/gpulens", f"OUT={tmp_path}")
    assert made.returncode == 0, made.stderr
    images = {c["image"] for obj in render(tmp_path) for c in containers(obj)}
    assert images == {f"registry.example.com/team/gpulens:{VERSION}"}


@pytest.mark.parametrize("variables", [(), ("IMAGE=Registry/Has:tag",), ("IMAGE=registry.example.com/gpulens", "TAG=1 2")])
def test_make_release_manifests_refuses_a_missing_or_malformed_image_or_tag_in_one_line(
        variables: tuple[str, ...], tmp_path: Path) -> None:
    made = make_release_manifests(*variables, f"OUT={tmp_path}")
    assert made.returncode == 2
    said = [line for line in made.stderr.splitlines() if line.startswith(("release-manifests: error:", "make release-manifests:"))]
    assert len(said) == 1 and ("IMAGE" in said[0] or "TAG" in said[0]), made.stderr
    assert "Traceback" not in made.stderr
    assert not (tmp_path / "kustomization.yaml").exists()


def test_the_app_reads_a_published_copy_that_the_writers_never_open() -> None:
    """DuckDB refuses a writer while the app holds the file open, so the app gets its own copy."""
    app_db = next(a for a in one("Deployment", "gpulens-dashboard")["spec"]["template"]["spec"]["containers"][0]["args"]
                  if a.startswith("--db="))
    assert app_db == "--db=/data/app/gpulens.duckdb"
    writers = [c for name in ("gpulens-collect", "gpulens-analyze") for c in containers(one("CronJob", name))]
    assert all("--db=/data/app/gpulens.duckdb" not in c.get("args", []) for c in writers)
    analyze = pod_spec(one("CronJob", "gpulens-analyze"))
    assert analyze is not None
    (publish,) = analyze["containers"]  # runs after every init container (analyze, recommend, report)
    script = " ".join(publish["args"])
    assert "cp /data/gpulens.duckdb /data/app/.gpulens.duckdb.tmp" in script
    assert script.rstrip().endswith("mv -f /data/app/.gpulens.duckdb.tmp /data/app/gpulens.duckdb")


def test_the_two_store_writers_can_never_run_at_the_same_time() -> None:
    """Each CronJob's window (schedule minute + start deadline + run deadline) stays inside its half hour."""
    windows = []
    for name in ("gpulens-collect", "gpulens-analyze"):
        cron = one("CronJob", name)["spec"]
        minute, hour, *_ = cron["schedule"].split()
        assert minute.isdigit() and hour == "*", cron["schedule"]
        assert cron["concurrencyPolicy"] == "Forbid"
        longest = cron["startingDeadlineSeconds"] + cron["jobTemplate"]["spec"]["activeDeadlineSeconds"]
        windows.append((int(minute) * 60, int(minute) * 60 + longest))
    (a_start, a_end), (b_start, b_end) = sorted(windows)
    assert a_end < b_start and b_end < a_start + 3600


def test_the_exporter_alerts_select_the_job_name_the_servicemonitor_produces() -> None:
    """The Prometheus Operator names the job after the Service (no jobLabel set)."""
    monitor = one("ServiceMonitor", "gpulens-exporter")
    assert "jobLabel" not in monitor["spec"]
    job = one("Service", "gpulens-exporter")["metadata"]["name"]
    groups = one("PrometheusRule", "gpulens")["spec"]["groups"]
    exporter_alerts = [rule for group in groups for rule in group["rules"] if rule.get("alert", "").startswith("GpulensExporter")]
    assert len(exporter_alerts) == 3
    for rule in exporter_alerts:
        if "up{" in rule["expr"]:
            assert f'up{{job="{job}"}}' in rule["expr"], rule["alert"]


def test_the_day_workers_overlay_splits_the_days_by_job_index_and_the_hourly_run_merges_them(
        renderings: dict[str, list[dict[str, Any]]]) -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in renderings["deploy/overlays/day-workers"]}
    job = objects[("CronJob", "gpulens-analyze-days")]["spec"]["jobTemplate"]["spec"]
    assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"]
    (worker,) = job["template"]["spec"]["containers"]
    assert f"--slice=$(JOB_COMPLETION_INDEX)/{job['completions']}" in worker["args"]
    assert "--db=/data/workers/days-$(JOB_COMPLETION_INDEX).duckdb" in worker["args"]
    assert "--dimensions-from=/data/app/gpulens.duckdb" in worker["args"]  # the published copy: no writer holds it
    hourly = objects[("CronJob", "gpulens-analyze")]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    export, analyze = hourly["initContainers"][:2]
    assert export["args"][:2] == ["export-parquet", "--db=/data/gpulens.duckdb"] and "--out=/data/parquet" in export["args"]
    assert {"--parquet=/data/parquet", "--parts-from=/data/workers/*.duckdb"} <= set(analyze["args"])
    assert objects[("PersistentVolumeClaim", "gpulens-store")]["spec"]["accessModes"] == ["ReadWriteMany"]
    minute, hour = objects[("CronJob", "gpulens-analyze-days")]["spec"]["schedule"].split()[:2]
    assert 5 < int(minute) < 30 and hour.isdigit()  # in the collector's half hour: nothing rewrites the Parquet


def test_the_fleet_workers_overlay_runs_one_pod_per_node_range_of_a_day_and_the_hourly_run_takes_the_same_ranges(
        renderings: dict[str, list[dict[str, Any]]]) -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in renderings["deploy/overlays/fleet-workers"]}
    job = objects[("CronJob", "gpulens-analyze-days")]["spec"]["jobTemplate"]["spec"]
    (worker,) = job["template"]["spec"]["containers"]
    args = dict(a.split("=", 1) for a in worker["args"][1:])
    ranges = int(args["--node-ranges"])
    assert job["completionMode"] == "Indexed" and job["completions"] == job["parallelism"] == ranges  # 1 day x ranges
    assert args["--window"] == "1d" and args["--slice"] == f"$(JOB_COMPLETION_INDEX)/{ranges}"
    assert args["--dimensions-from"] == "/data/app/gpulens.duckdb" and args["--parquet"] == "/data/parquet"
    hourly = objects[("CronJob", "gpulens-analyze")]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    analyze = hourly["initContainers"][1]
    assert {f"--node-ranges={ranges}", "--parts-from=/data/workers/*.duckdb", args["--config"]
            .join(["--config=", ""])} <= set(analyze["args"])
    interval = objects[("ConfigMap", "gpulens-analysis-interval")]["data"]["interval.yaml"]
    assert "sample_interval_seconds:" in interval  # a node range's part needs the interval fixed
    for spec, container in ((job["template"]["spec"], worker), (hourly, analyze)):
        mount = next(m for m in container["volumeMounts"] if m["name"] == "analysis-interval")
        assert args["--config"].startswith(mount["mountPath"] + "/")
        assert any(v.get("configMap", {}).get("name") == "gpulens-analysis-interval" for v in spec["volumes"])
