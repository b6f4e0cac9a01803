"""Least privilege in deploy/base: a read-only analytics identity, who may reach what, an exporter without
root whose memory limit covers the largest kubelet reply it accepts."""

from __future__ import annotations

from typing import Any

from gpulens.exporter.kubelet.client import MAX_RECEIVE_BYTES
from tests.support.rbac import granted
from tests.test_manifests import containers, one, pod_spec, rendered

READ_VERBS = frozenset({"get", "list", "watch"})
MIB = 1024 * 1024

WORST_CASE_BYTES_PER_REPLY_BYTE = 68
"""Peak memory per byte of a PodResources ``List`` reply, in the worst case: a reply made only of
one-character GPU device ids (3 wire bytes each, the densest) parses into 66 bytes of upb message and
``DeviceGrant`` objects per wire byte (measured on CPython 3.11 with protobuf's upb, 16 MiB reply:
1.06 GiB); the gRPC receive buffer and the wire bytes add one copy each."""


def _mebibytes(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    return float(quantity[:-2]) * units[quantity[-2:]]


def _ingress_peers(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [peer for rule in policy["spec"]["ingress"] for peer in rule["from"]]


def _template_labels(kind: str, name: str) -> dict[str, str]:
    obj = one(kind, name)
    template = obj["spec"]["jobTemplate"]["spec"]["template"] if kind == "CronJob" else obj["spec"]["template"]
    labels: dict[str, str] = template["metadata"]["labels"]
    return labels


def _ports_named(policy: dict[str, Any]) -> set[str]:
    return {port["port"] for rule in policy["spec"]["ingress"] for port in rule["ports"]}


def test_the_dry_run_analytics_job_runs_under_its_own_read_only_account_without_a_token() -> None:
    spec = pod_spec(one("CronJob", "gpulens-analyze"))
    assert spec is not None
    assert spec["serviceAccountName"] == "gpulens-analytics"
    assert spec["automountServiceAccountToken"] is False  # the dry run never calls the API server
    assert all("--apply" not in c.get("args", []) for c in containers(one("CronJob", "gpulens-analyze")))
    role = one("ClusterRole", "gpulens-analytics")
    assert {verb for _, _, verb in granted(role["rules"])} <= READ_VERBS
    binding = one("ClusterRoleBinding", "gpulens-analytics")
    assert binding["roleRef"]["name"] == "gpulens-analytics"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpulens-analytics", "namespace": "gpulens"}]


def test_only_prometheus_and_the_collector_reach_the_exporter_and_only_on_its_metrics_port() -> None:
    policy = one("NetworkPolicy", "gpulens-exporter")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= _template_labels("DaemonSet", "gpulens-exporter").items()
    prometheus, collector = _ingress_peers(policy)
    assert prometheus["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    assert prometheus["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    assert set(collector) == {"podSelector"}  # this namespace only
    assert collector["podSelector"]["matchLabels"].items() <= _template_labels("CronJob", "gpulens-collect").items()
    (container,) = containers(one("DaemonSet", "gpulens-exporter"))
    assert _ports_named(policy) == {p["name"] for p in container["ports"]} == {"metrics"}


def test_only_the_ingress_controller_reaches_the_dashboard() -> None:
    policy = one("NetworkPolicy", "gpulens-dashboard")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    selected = policy["spec"]["podSelector"]["matchLabels"].items()
    assert selected <= _template_labels("Deployment", "gpulens-dashboard").items()
    assert not selected <= _template_labels("CronJob", "gpulens-analyze").items()
    assert _ingress_peers(policy) == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]
    assert _ports_named(policy) == {"http"}


def test_every_pod_runs_as_non_root_the_exporter_included() -> None:
    for obj in rendered():
        spec = pod_spec(obj)
        if spec is None:
            continue
        for container in containers(obj):
            context = {**spec.get("securityContext", {}), **container["securityContext"]}
            where = f"{obj['metadata']['name']}:{container['name']}"
            assert context["runAsNonRoot"] is True, where
            assert context["runAsUser"] != 0, where


def test_the_exporter_memory_limit_covers_the_largest_kubelet_reply_it_accepts() -> None:
    (container,) = containers(one("DaemonSet", "gpulens-exporter"))
    limit = _mebibytes(container["resources"]["limits"]["memory"])
    running = _mebibytes(container["resources"]["requests"]["memory"])  # the exporter between replies
    worst_reply = WORST_CASE_BYTES_PER_REPLY_BYTE * MAX_RECEIVE_BYTES / MIB
    assert limit >= running + worst_reply, (limit, running, worst_reply)


def test_the_base_installs_the_network_policies_and_the_analytics_identity() -> None:
    kinds = {(obj["kind"], obj["metadata"]["name"]) for obj in rendered()}
    assert {("NetworkPolicy", "gpulens-exporter"), ("NetworkPolicy", "gpulens-dashboard"),
            ("ServiceAccount", "gpulens-analytics"), ("ClusterRole", "gpulens-analytics")} <= kinds
