"""From an injected GPU fault to the quarantine write, with the real parts (the test and the benchmark run it).

Two in-process exporters (fake device sources at our NVML boundary) serve one H100 each, on the nodes
``train-node-00`` and ``infer-node-00`` of a small fleet whose last health run is all healthy. The real
Prometheus scrapes them and evaluates deploy/prometheus/gpulens-rules.yaml unchanged; the real
Alertmanager routes the alerts to the remediation service's webhook; the service (``--apply``) writes to
the FakeKubernetesApi. Then two faults are injected at once:

- hard: the train GPU falls off the bus (XID 79: ``up`` 0, the XID's last-seen time): ``GpuDrainClassXid``;
- precursor: the infer GPU reports two XID 92 (high single-bit ECC rate), a reset-class XID that is not a
  drain-class one: ``GpuResetClassXidsRepeating`` (an early warning, severity ``warning``).

Measured per fault: from the fault's first sample in Prometheus (its scrape timestamp) to the moment
the node carries the gpulens taint in the fake API server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from analytics.remediation.policy import RemediationPolicy
from analytics.remediation.service import RemediationService
from analytics.remediation.webhook_server import RemediationServer
from exporter.server import serve_in_thread
from exporter.settings import ExporterSettings
from gpulens.core.device_model import DeviceReadings, Gpu, HealthReadings, SharingMode
from gpulens.core.kube_api import KubeConnection, KubernetesClient
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.alert_fleet import gpu_uuid, healthy_fleet_store, node_name, our_taints, put_nodes
from tests.support.alertmanager import running_alertmanager, webhook_config
from tests.support.fakes import FakeAllocationSource, FakeDeviceSource
from tests.support.prometheus import PrometheusServer, running_prometheus, scrape_config

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "gpulens-rules.yaml"
HARD = node_name("train", 0)
WARN = node_name("infer", 0)
GIB = 1024**3


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class FaultyGpu:
    """One H100 whose readings turn faulty when told: ``lost`` (XID 79) or ``xids`` (two XID 92)."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.uuid = gpu_uuid(node, 0)
        self.fault: str | None = None
        self.since = 0.0

    def inject(self, fault: str, at: float) -> None:
        self.since, self.fault = at, fault

    def readings(self, now: float) -> DeviceReadings:
        gpu = Gpu(self.uuid, 0, "NVIDIA H100 80GB HBM3", 80 * GIB, SharingMode.EXCLUSIVE,
                  memory_used_bytes=40 * GIB, activity_ratio=0.6,
                  health=HealthReadings(temperature_celsius=55.0, power_watts=450.0, ecc_corrected_total=0,
                                        ecc_uncorrected_total=0, pcie_replay_total=0))
        if self.fault == "lost":
            gpu = replace(gpu, up=False, memory_used_bytes=None, activity_ratio=None,
                          health=HealthReadings(xid_counts={79: 1}, xid_last_seen={79: self.since}))
        elif self.fault == "xids":
            gpu = replace(gpu, health=replace(gpu.health, xid_counts={92: 2}, xid_last_seen={92: self.since}))
        return DeviceReadings(node=self.node, timestamp=now, gpus=(gpu,))


@dataclass(frozen=True)
class FaultTimes:
    seconds_to_quarantine_hard: float
    seconds_to_quarantine_warn: float
    hard_taint: list[dict[str, Any]]
    warn_taint: list[dict[str, Any]]
    others_tainted: list[str]
    service_log: list[str]


@contextmanager
def _applying(fake: FakeKubernetesApi) -> Iterator[KubernetesClient]:
    with KubernetesClient(KubeConnection(fake.url, {})) as api:
        yield api


def first_sample(prom: PrometheusServer, selector: str, bad: float | None) -> float:
    """Scrape time of the first sample of ``selector`` (equal to ``bad``, when given) in the last 10 minutes."""
    for series in prom.query(f"{selector}[10m]"):
        for ts, value in series["values"]:
            if bad is None or float(value) == bad:
                return float(ts)
    raise AssertionError(f"no sample of {selector} in Prometheus")


def fault_to_quarantine(work: Path, *, scrape_seconds: float, group_wait: str, group_interval: str,
                        timeout: float) -> FaultTimes:
    """Inject both faults into a running pipeline; the seconds from each fault's first sample to its taint."""
    db = work / "gpulens.duckdb"
    nodes = healthy_fleet_store(db, {"train": 4, "infer": 4}, utcnow() - timedelta(minutes=1))
    gpus = {HARD: FaultyGpu(HARD), WARN: FaultyGpu(WARN)}
    log: list[str] = []
    with ExitStack() as stack:
        fake = stack.enter_context(FakeKubernetesApi())
        put_nodes(fake, nodes)
        service = RemediationService(db, RemediationPolicy(), clock=utcnow, api=lambda: _applying(fake))
        server = RemediationServer(("127.0.0.1", 0), service, log=log.append)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        stack.callback(server.server_close)
        stack.callback(server.shutdown)
        exporters = [stack.enter_context(serve_in_thread(
            ExporterSettings(listen="127.0.0.1:0", interval_seconds=0.5), device_source=FakeDeviceSource(g.readings),
            allocation_source=FakeAllocationSource(), node=n, backend="sim")) for n, g in gpus.items()]
        am = stack.enter_context(running_alertmanager(
            webhook_config(f"http://127.0.0.1:{server.port}/alerts", group_wait=group_wait,
                           group_interval=group_interval), work / "alertmanager"))
        config = scrape_config([e.url.split("//", 1)[1] for e in exporters], job="gpulens-exporter",
                               scrape_interval=f"{scrape_seconds:g}s")
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [am.split("//", 1)[1]]}]}]}
        prom = stack.enter_context(running_prometheus(data_dir=work / "prometheus", config=config,
                                                      rule_files=[RULES]))
        prom.wait_for_targets_up(2, timeout=max(30.0, 4 * scrape_seconds))
        time.sleep(2 * scrape_seconds)  # healthy samples first
        now = time.time()
        gpus[HARD].inject("lost", now)
        gpus[WARN].inject("xids", now)
        tainted: dict[str, float] = {}
        deadline = time.monotonic() + timeout
        while len(tainted) < 2 and time.monotonic() < deadline:
            for node in (HARD, WARN):
                if node not in tainted and our_taints(fake, node):
                    tainted[node] = time.time()
            time.sleep(0.05)
        missing = [n for n in (HARD, WARN) if n not in tainted]
        assert not missing, f"not quarantined within {timeout}s: {missing}; service said: {log}"
        hard_first = first_sample(prom, f'gpulens_gpu_up{{node="{HARD}"}}', 0.0)
        warn_first = first_sample(prom, f'gpulens_gpu_xid_errors_total{{node="{WARN}",xid="92"}}', None)
        return FaultTimes(tainted[HARD] - hard_first, tainted[WARN] - warn_first, our_taints(fake, HARD),
                          our_taints(fake, WARN), [n for n in nodes if n not in gpus and our_taints(fake, n)], log)
