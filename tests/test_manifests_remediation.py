"""deploy/base runs the alert-driven remediation service: one writer, dry run, reachable from Alertmanager
and Prometheus only, routed exactly the alerts it acts on, with the remediator's RBAC covering its writes."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import yaml

from analytics.remediation.alerts import EARLY_WARNINGS, HARD_FAULTS, parse_webhook
from analytics.remediation.policy import RemediationPolicy
from analytics.remediation.service import RemediationService
from analytics.remediation.webhook_server import WEBHOOK_PATH
from gpulens.core.kube_api import KubeConnection, KubernetesClient
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.alert_fleet import alert, gpu_uuid, healthy_fleet_store, node_name, put_nodes, webhook
from tests.support.cli import ROOT
from tests.support.rbac import allowing, is_discovery, permission, role_rules
from tests.test_manifests import containers, one, pod_spec

RULES = ROOT / "deploy/prometheus/gpulens-rules.yaml"
RBAC_FILE = ROOT / "deploy/rbac/gpulens-remediator.yaml"


def args() -> list[str]:
    (container,) = containers(one("Deployment", "gpulens-remediation"))
    return list(container["args"])


def test_the_service_is_one_writer_in_a_dry_run_without_a_token() -> None:
    deployment = one("Deployment", "gpulens-remediation")
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    spec = pod_spec(deployment)
    assert spec is not None
    assert spec["serviceAccountName"] == "gpulens-remediator"
    assert spec["automountServiceAccountToken"] is False, "a dry run never calls the API server"
    assert args()[0] == "remediate-serve" and "--apply" not in args()


def test_the_service_reads_the_published_store_and_records_in_a_file_of_its_own() -> None:
    assert "--db=/data/app/gpulens.duckdb" in args()
    record = [a for a in args() if a.startswith("--record-db=")]
    assert record and record[0] not in ("--record-db=/data/gpulens.duckdb", "--record-db=/data/app/gpulens.duckdb")


def test_the_service_runs_next_to_the_dashboard_where_the_store_volume_is_attached() -> None:
    spec = pod_spec(one("Deployment", "gpulens-remediation"))
    assert spec is not None
    (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    dashboard = one("Deployment", "gpulens-dashboard")["spec"]["template"]["metadata"]["labels"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= dashboard.items()


def test_alertmanager_routes_exactly_the_alerts_the_service_acts_on_to_its_webhook() -> None:
    config = one("AlertmanagerConfig", "gpulens-remediation")["spec"]
    (matcher,) = config["route"]["matchers"]
    assert (matcher["name"], matcher["matchType"]) == ("alertname", "=~")
    routed = set(matcher["value"].split("|"))
    assert routed == set(HARD_FAULTS) | set(EARLY_WARNINGS)
    rules = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    assert routed <= rules, f"routed alerts the rules do not define: {routed - rules}"
    assert config["route"]["groupBy"] == ["alertname", "node"], "each node's alert goes out on its own"
    (receiver,) = config["receivers"]
    (hook,) = receiver["webhookConfigs"]
    service = one("Service", "gpulens-remediation")
    (port,) = service["spec"]["ports"]
    assert hook["url"] == f"http://gpulens-remediation.gpulens.svc:{port['port']}{WEBHOOK_PATH}"
    assert hook["sendResolved"] is True, "the healthy period counts from the resolution"


def test_only_alertmanager_and_prometheus_reach_the_service_and_only_on_its_port() -> None:
    policy = one("NetworkPolicy", "gpulens-remediation")
    peers = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]
    assert sorted(p["podSelector"]["matchLabels"]["app.kubernetes.io/name"] for p in peers) == ["alertmanager", "prometheus"]
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == {"http"}


def test_the_service_metrics_are_scraped_under_the_job_its_alerts_select() -> None:
    monitor = one("ServiceMonitor", "gpulens-remediation")
    assert "jobLabel" not in monitor["spec"], "the Prometheus Operator names the job after the Service"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= one("Service", "gpulens-remediation")["metadata"]["labels"].items()
    exprs = [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] if g["name"] == "gpulens.remediation.alerts"
             for r in g["rules"]]
    assert exprs and any('job="gpulens-remediation"' in e for e in exprs)


def test_every_request_of_the_service_with_apply_is_granted_to_the_remediator(tmp_path: Path) -> None:
    end = datetime(2026, 12, 2, 3, 0)
    db = tmp_path / "gpulens.duckdb"
    nodes = healthy_fleet_store(db, {"train": 10}, end)
    node = node_name("train", 1)
    now = [end + timedelta(minutes=10)]
    firing = alert("GpuDown", node, end + timedelta(minutes=9), gpu=gpu_uuid(node, 0))
    with FakeKubernetesApi() as fake:
        put_nodes(fake, nodes)
        fake.add_pod("team-a", "trainer-0", node, labels={"kueue.x-k8s.io/tas": "true"})

        def api() -> KubernetesClient:
            return KubernetesClient(KubeConnection(fake.url, {}))

        svc = RemediationService(db, RemediationPolicy(healthy_seconds=60), clock=lambda: now[0], api=api)
        svc.receive(parse_webhook(webhook([firing])))
        now[0] += timedelta(minutes=5)
        svc.receive(parse_webhook(webhook([{**firing, "status": "resolved", "endsAt": "2026-12-02T03:12:00Z"}])))
        needs = {permission(r) for r in fake.requests if not is_discovery(r.path)}
    rules = role_rules(yaml.safe_load_all(RBAC_FILE.read_text()))
    assert {(n.resource, n.verb) for n in needs} >= {("nodes", "list"), ("nodes", "patch")}
    for need in needs:
        assert allowing(rules, need), f"{need} is not granted by {RBAC_FILE.name}"
