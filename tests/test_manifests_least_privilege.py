"""Least privilege in deploy/base: a read-only analytics identity, who may reach what, an exporter without
root whose memory limit covers the largest kubelet reply it accepts."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from exporter.kubelet.client import (
    MAX_GPU_GRANTS,
    MAX_RECEIVE_BYTES,
    KubeletUnavailableError,
    parse_list_response,
)
from exporter.kubelet.proto import api_pb2
from tests.support.cli import ROOT
from tests.support.rbac import granted
from tests.test_manifests import containers, one, pod_spec, rendered

READ_VERBS = frozenset({"get", "list", "watch"})
MIB = 1024 * 1024

PARSED_BYTES_PER_REPLY_BYTE = 24
"""Bound of the memory a parsed PodResources ``List`` reply takes per wire byte; measured 18 for the
densest reply (empty device ids, 2 wire bytes each) with protobuf's upb on CPython 3.11 (next test)."""
BYTES_PER_GRANT = 512
"""Bound of the memory per GPU grant built from a reply (its strings are shared with its pod and
container); measured 171 (next test)."""
REPLY_COPIES = 3
"""The reply's bytes as gRPC received them, as handed to the parser, and the grants' own strings (device
ids, DRA pool and device names) copied out of it."""

_MEASURE = """
import gc, resource, sys
from exporter.kubelet.client import MAX_GPU_GRANTS, parse_list_response
from exporter.kubelet.proto import api_pb2
reply = api_pb2.ListPodResourcesResponse()
if sys.argv[1] == "grants":  # the most GPU grants a reply may hold, with long shared names
    pod = reply.pod_resources.add(name="p" * 2000, namespace="n" * 2000)
    pod.containers.add(name="c" * 2000).devices.add(resource_name="nvidia.com/gpu").device_ids.extend(
        [""] * MAX_GPU_GRANTS)
else:  # 4 MiB of the densest content: empty ids of a device that is not a GPU
    i = 0
    while reply.ByteSize() < 4 * 1024 * 1024:
        pod = reply.pod_resources.add(name=f"p{i}", namespace="n")
        pod.containers.add(name="c").devices.add(resource_name="x").device_ids.extend([""] * 5000)
        i += 1
wire = reply.SerializeToString()
del reply, pod
gc.collect()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
view = parse_list_response(api_pb2.ListPodResourcesResponse.FromString(wire))
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(grown / len(wire) if sys.argv[1] == "reply" else grown / len(view.devices))
"""


def _measured(kind: str) -> float:
    proc = subprocess.run([sys.executable, "-c", _MEASURE, kind], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True)
    return float(proc.stdout)


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


def test_every_pod_runs_as_non_root_but_the_exporter_which_is_root_without_any_capability() -> None:
    """The kubelet's pod-resources socket is root-owned (mode 0755): only the exporter connects to it."""
    for obj in rendered():
        spec = pod_spec(obj)
        if spec is None:
            continue
        for container in containers(obj):
            context = {**spec.get("securityContext", {}), **container["securityContext"]}
            where = f"{obj['metadata']['name']}:{container['name']}"
            assert context["capabilities"]["drop"] == ["ALL"] and "add" not in context["capabilities"], where
            assert context["allowPrivilegeEscalation"] is False and context.get("privileged") is not True, where
            assert context["readOnlyRootFilesystem"] is True, where
            if obj["metadata"]["name"] == "gpulens-exporter":
                assert context["runAsUser"] == 0 and context["runAsNonRoot"] is False, where
            else:
                assert context["runAsNonRoot"] is True and context["runAsUser"] != 0, where


def test_the_exporter_memory_limit_covers_the_largest_kubelet_reply_it_accepts() -> None:
    (container,) = containers(one("DaemonSet", "gpulens-exporter"))
    limit = _mebibytes(container["resources"]["limits"]["memory"])
    running = _mebibytes(container["resources"]["requests"]["memory"])  # the exporter between replies
    reply = (REPLY_COPIES + PARSED_BYTES_PER_REPLY_BYTE) * MAX_RECEIVE_BYTES / MIB
    grants = MAX_GPU_GRANTS * BYTES_PER_GRANT / MIB
    assert limit >= running + reply + grants, (limit, running, reply, grants)


def test_a_parsed_reply_and_its_grants_stay_within_the_bounds_the_memory_limit_assumes() -> None:
    """Peak memory growth of the parse itself (not time), in a fresh interpreter."""
    assert _measured("reply") <= PARSED_BYTES_PER_REPLY_BYTE
    assert _measured("grants") <= BYTES_PER_GRANT


def test_a_reply_with_more_gpu_grants_than_the_bound_is_refused_before_they_are_built() -> None:
    reply = api_pb2.ListPodResourcesResponse()
    devices = reply.pod_resources.add(name="p", namespace="n").containers.add(name="c").devices
    devices.add(resource_name="nvidia.com/gpu").device_ids.extend(["x"] * MAX_GPU_GRANTS)
    assert len(parse_list_response(reply).devices) == MAX_GPU_GRANTS
    devices.add(resource_name="nvidia.com/mig-1g.18gb").device_ids.append("y")
    with pytest.raises(KubeletUnavailableError, match=f"more than {MAX_GPU_GRANTS} GPU grants"):
        parse_list_response(reply)


def test_the_base_installs_the_network_policies_and_the_analytics_identity() -> None:
    kinds = {(obj["kind"], obj["metadata"]["name"]) for obj in rendered()}
    assert {("NetworkPolicy", "gpulens-exporter"), ("NetworkPolicy", "gpulens-dashboard"),
            ("ServiceAccount", "gpulens-analytics"), ("ClusterRole", "gpulens-analytics")} <= kinds
