"""`gpulens remediate-serve`: Alertmanager webhooks decided with `gpulens remediate`'s policy and guard rails."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from analytics.remediation.alerts import BadWebhook, parse_webhook
from analytics.remediation.policy import RemediationPolicy
from analytics.remediation.service import RemediationService
from analytics.remediation.webhook_server import RemediationServer
from gpulens.core.kube_api import KubeConnection, KubernetesClient
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.alert_fleet import (
    alert,
    gpu_uuid,
    healthy_fleet_store,
    node_name,
    our_taints,
    put_nodes,
    webhook,
)
from tests.support.cli import assert_one_line_error, gpulens

END = datetime(2026, 12, 2, 3, 0)
OURS = "gpulens.io/gpu-unhealthy"


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, list[str]]:
    """Ten H100 nodes in pool 'train' and two in pool 'infer', all healthy in the last health run."""
    path = tmp_path / "gpulens.duckdb"
    return path, healthy_fleet_store(path, {"train": 10, "infer": 2}, END)


@contextmanager
def applying(fake: FakeKubernetesApi) -> Iterator[KubernetesClient]:
    with KubernetesClient(KubeConnection(fake.url, {})) as api:
        yield api


def service(db: Path, clock: Clock, fake: FakeKubernetesApi | None = None, **policy: Any) -> RemediationService:
    return RemediationService(db, RemediationPolicy(**policy), clock=clock,
                              api=(lambda: applying(fake)) if fake is not None else None, sleep=lambda _s: None)


def outcomes(db: Path) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute("SELECT node, action, mode, outcome, evidence FROM remediation_outcomes "
                           "ORDER BY decided_at, node").fetchall()


def lost(node: str, starts: datetime, **kw: Any) -> dict[str, Any]:
    return alert("GpuDrainClassXid", node, starts, gpu=gpu_uuid(node, 0), xid="79", **kw)


def test_a_hard_fault_alert_is_decided_at_once_and_recorded_with_the_alert_as_evidence(store) -> None:  # type: ignore[no-untyped-def]
    db, _ = store
    clock = Clock(END + timedelta(minutes=10))
    node = node_name("train", 3)
    ev = service(db, clock).receive(parse_webhook(webhook([lost(node, END + timedelta(minutes=9))])))
    assert not ev.error
    assert [(d.node, d.action, d.reason) for d in ev.changed] == [(node, "taint", "drain")]
    [(rec_node, action, mode, outcome, evidence)] = outcomes(db)
    assert (rec_node, action, mode, outcome) == (node, "taint", "dry-run", None), "a dry run records, writes nothing"
    assert "alert GpuDrainClassXid firing since 2026-12-02 03:09:00 UTC" in evidence
    assert ev.report is not None and ev.report.inputs.window[1] == clock.now, "the evidence runs up to the decision"


def test_a_repeated_or_regrouped_alert_writes_and_records_nothing_new(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    clock = Clock(END + timedelta(minutes=10))
    node = node_name("train", 3)
    first = lost(node, END + timedelta(minutes=9))
    with FakeKubernetesApi() as fake:
        put_nodes(fake, nodes)
        svc = service(db, clock, fake)
        svc.receive(parse_webhook(webhook([first])))
        clock.now += timedelta(minutes=5)
        again = svc.receive(parse_webhook(webhook([first])))
        regrouped = svc.receive(parse_webhook(webhook(
            [first, alert("GpuDown", node, END + timedelta(minutes=9), gpu=gpu_uuid(node, 0))], group_key="other")))
        patches = fake.requests_to("PATCH", f"/api/v1/nodes/{node}")
        taints = our_taints(fake, node)
    assert again.changed == () and regrouped.changed == ()
    assert len(patches) == 1, "one write: the repeat reads the live taint and leaves it"
    assert taints == [{"key": OURS, "value": "xid-79", "effect": "NoSchedule"}]
    assert [(n, a, m, o) for n, a, m, o, _ in outcomes(db)] == [(node, "taint", "apply", "applied")]


def test_a_flood_of_one_alert_per_node_of_a_flavor_holds_on_the_breaker(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    clock = Clock(END + timedelta(minutes=10))
    train = [n for n in nodes if n.startswith("train")]
    body = webhook([lost(n, END + timedelta(minutes=8)) for n in train])
    with FakeKubernetesApi() as fake:
        put_nodes(fake, nodes)
        svc = service(db, clock, fake)
        ev = svc.receive(parse_webhook(body))
        held_again = svc.receive(parse_webhook(body))
        patches = fake.requests_to("PATCH")
    assert {d.action for d in ev.changed} == {"hold"} and len(ev.changed) == len(train)
    assert all("circuit breaker: 10 of 10 train node(s)" in d.reason for d in ev.changed)
    assert patches == [], "nothing is quarantined while the breaker holds"
    assert held_again.changed == ()
    metrics = svc.metrics.render().decode()
    assert 'gpulens_remediation_breaker_tripped{flavor="train"} 1.0' in metrics
    assert 'gpulens_remediation_breaker_tripped{flavor="infer"} 0.0' in metrics
    assert 'gpulens_remediation_decisions_total{action="hold",outcome="held"} 10.0' in metrics


def test_the_caps_and_the_last_schedulable_node_hold_for_alerts_as_for_remediate(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    clock = Clock(END + timedelta(minutes=10))
    infer = [n for n in nodes if n.startswith("infer")]
    with FakeKubernetesApi() as fake:
        put_nodes(fake, nodes)
        svc = service(db, clock, fake, breaker_share=1.0, max_share=1.0)
        first = svc.receive(parse_webhook(webhook([lost(infer[0], END + timedelta(minutes=1))])))
        clock.now += timedelta(minutes=1)
        second = svc.receive(parse_webhook(webhook([lost(infer[1], END + timedelta(minutes=10))])))
    assert [(d.node, d.action) for d in first.changed] == [(infer[0], "taint")]
    [refused] = [d for d in second.changed if d.node == infer[1]]
    assert refused.action == "refuse" and "the last schedulable infer node is never tainted" in refused.reason


def test_an_early_warning_alert_quarantines_its_node_as_a_watch_candidate(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    clock = Clock(END + timedelta(minutes=10))
    node = node_name("train", 5)
    warn = alert("GpuPcieReplayRateRising", node, END + timedelta(minutes=2), gpu=gpu_uuid(node, 1), severity="warning")
    with FakeKubernetesApi() as fake:
        put_nodes(fake, nodes)
        ev = service(db, clock, fake).receive(parse_webhook(webhook([warn])))
        taints = our_taints(fake, node)
    assert [(d.node, d.action, d.reason) for d in ev.changed] == [(node, "taint", "watch")]
    assert taints == [{"key": OURS, "value": "trend-pcie-replay-per-hour", "effect": "NoSchedule"}]


def test_a_resolved_alert_releases_its_node_only_after_the_healthy_period(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    clock = Clock(END + timedelta(minutes=10))
    node = node_name("train", 3)
    firing = lost(node, END + timedelta(minutes=9))
    with FakeKubernetesApi() as fake:
        put_nodes(fake, nodes)
        svc = service(db, clock, fake, healthy_seconds=3600)
        svc.receive(parse_webhook(webhook([firing])))
        clock.now = END + timedelta(minutes=30)
        resolved = {**firing, "status": "resolved", "endsAt": "2026-12-02T03:30:00Z"}
        kept = svc.receive(parse_webhook(webhook([resolved])))
        still = our_taints(fake, node)
        clock.now = END + timedelta(minutes=91)
        released = svc.resync()
        after = our_taints(fake, node)
    assert kept.changed == () and still, "resolved 0 min ago: kept"
    assert [(d.node, d.action) for d in released.changed] == [(node, "untaint")]
    assert "healthy since 2026-12-02 03:30" in released.changed[0].reason
    assert after == []


def test_a_firing_alert_not_sent_again_within_the_ttl_counts_as_ended(store) -> None:  # type: ignore[no-untyped-def]
    db, _ = store
    clock = Clock(END + timedelta(minutes=10))
    svc = RemediationService(db, RemediationPolicy(), clock=clock, alert_ttl_seconds=600)
    svc.receive(parse_webhook(webhook([lost(node_name("train", 1), END + timedelta(minutes=9))])))
    assert svc.book.firing(clock.now)
    clock.now += timedelta(minutes=11)
    assert svc.book.firing(clock.now) == []
    assert svc.book.resolved[node_name("train", 1)] == END + timedelta(minutes=10)


def test_alerts_the_service_cannot_act_on_are_ignored_with_the_reason(store) -> None:  # type: ignore[no-untyped-def]
    db, _ = store
    clock = Clock(END + timedelta(minutes=10))
    body = webhook([alert("GpuAllocatedButIdle", node_name("train", 1), END),
                    alert("GpuDown", "", END),
                    lost("nowhere-node", END)])
    ev = service(db, clock).receive(parse_webhook(body))
    lines = ev.lines()
    assert ev.changed == ()
    assert any("GpuAllocatedButIdle: not a GPU fault or early-warning alert of gpulens" in x for x in lines)
    assert any("GpuDown: names no node" in x for x in lines)
    assert any("node nowhere-node is not in the health run (no flavor known): no decision" in x for x in lines)


@pytest.mark.parametrize(("body", "says"), [
    (b"not json", "not an Alertmanager webhook payload"),
    (b'{"version": "4"}', "alerts"),
    (b'{"version": "3", "alerts": []}', "only version 4"),
    (json.dumps({"version": "4", "alerts": [{"status": "firing", "labels": {"alertname": "GpuDown", "node": "n"},
                                           "startsAt": "yesterday"}]}).encode(),
     "RFC 3339"),
])
def test_a_body_that_is_not_a_version_4_webhook_is_refused_by_name(body: bytes, says: str) -> None:
    with pytest.raises(BadWebhook, match=says):
        parse_webhook(body)


def post(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:  # noqa: S310 - loopback
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read())


@contextmanager
def serving(svc: RemediationService) -> Iterator[str]:
    server = RemediationServer(("127.0.0.1", 0), svc)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_webhook_answers_200_with_the_decisions_400_for_a_bad_body_and_503_when_the_store_is_missing(
        store, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db, _ = store
    clock = Clock(END + timedelta(minutes=10))
    body = webhook([lost(node_name("train", 2), END + timedelta(minutes=9))])
    with serving(service(db, clock)) as url:
        status, answer = post(url + "/alerts", body)
        bad, refused = post(url + "/alerts", b"{}")
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:  # noqa: S310 - loopback
            metrics = resp.read().decode()
    assert status == 200 and any("taint train-node-02" in line for line in answer["lines"])
    assert bad == 400 and "alerts" in refused["error"]
    assert 'gpulens_remediation_webhooks_total{result="ok"} 1.0' in metrics
    assert 'gpulens_remediation_alert_to_action_seconds_count{action="taint"} 1.0' in metrics
    with serving(service(tmp_path / "gone.duckdb", clock)) as url:
        unavailable, why = post(url + "/alerts", body)
    assert unavailable == 503 and "no such store" in why["error"], "Alertmanager retries a 5xx"


def test_serve_refuses_a_file_that_is_not_a_store_and_a_bad_listen_address_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes.duckdb").write_text("not a DuckDB file\n" * 100)
    assert_one_line_error(gpulens("remediate-serve", "--db", str(tmp_path / "notes.duckdb")), "notes.duckdb")
    assert_one_line_error(gpulens("remediate-serve", "--db", str(tmp_path / "x"), "--listen", "nowhere"), "--listen")


def test_an_alert_on_a_dra_gpu_quarantines_that_device_alone_and_leaves_the_node_schedulable(store) -> None:  # type: ignore[no-untyped-def]
    db, nodes = store
    clock = Clock(END + timedelta(minutes=10))
    node = node_name("train", 6)
    group = "/apis/resource.k8s.io"
    with FakeKubernetesApi() as fake:
        put_nodes(fake, nodes)
        fake.serve_api_group("resource.k8s.io", {"v1": ["resourceslices"], "v1beta2": ["devicetaintrules"]})
        fake.put(f"{group}/v1/resourceslices/{node}-gpu.nvidia.com", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"{node}-gpu.nvidia.com"},
            "spec": {"nodeName": node, "driver": "gpu.nvidia.com", "pool": {"name": node, "generation": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"uuid": {"string": gpu_uuid(node, i)}}}
                                 for i in range(2)]}})
        theirs = f"{group}/v1beta2/devicetaintrules/ops-quarantine"
        fake.put(theirs, {"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule",
                          "metadata": {"name": "ops-quarantine", "labels": {"team": "ops"}},
                          "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "other", "device": "gpu-0"},
                                   "taint": {"key": "ops", "effect": "NoSchedule"}}})
        ev = service(db, clock, fake).receive(parse_webhook(webhook([lost(node, END + timedelta(minutes=9))])))
        rules = {p: o for p, o in fake.objects.items() if "/devicetaintrules/" in p and p != theirs}
        node_taints = our_taints(fake, node)
    assert [(d.node, d.action, d.scope) for d in ev.changed] == [(node, "taint", "device")]
    (rule,) = rules.values()
    assert rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": node, "device": "gpu-0"}
    assert rule["spec"]["taint"]["value"] == "xid-79"
    assert node_taints == [], "the node's other GPU keeps taking work"
