"""End to end with the real parts: exporter fault -> real Prometheus rules -> real Alertmanager -> the
remediation service -> the quarantine in the (fake) Kubernetes API. Behaviour only: the benchmark measures."""

from __future__ import annotations

from pathlib import Path

from tests.support.alertmanager import alertmanager_binary
from tests.support.fault_quarantine import fault_to_quarantine
from tests.support.prometheus import require_binary


def test_a_lost_gpu_and_a_repeating_reset_class_xid_are_quarantined_from_their_alerts_alone(tmp_path: Path) -> None:
    require_binary("prometheus")
    alertmanager_binary()
    times = fault_to_quarantine(tmp_path, scrape_seconds=1, group_wait="1s", group_interval="1s", timeout=90)
    assert times.hard_taint == [{"key": "gpulens.io/gpu-unhealthy", "value": "xid-79", "effect": "NoSchedule"}]
    assert times.warn_taint == [{"key": "gpulens.io/gpu-unhealthy", "value": "trend-reset-class-xids",
                                 "effect": "NoSchedule"}]
    assert times.others_tainted == [], "only the faulty GPUs' nodes"
    assert times.seconds_to_quarantine_hard > 0 and times.seconds_to_quarantine_warn > 0, \
        "the quarantine follows the fault's first sample"
    assert any("taint train-node-00 (train): drain -> applied" in line for line in times.service_log)
    assert any("taint infer-node-00 (infer): watch -> applied" in line for line in times.service_log)
