"""The analysis summary lists GPUs on watch with their trend start, and the lead of warnings before failures."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from analytics.summary import AnalysisSummary, DrainCandidate

T0 = datetime(2026, 11, 30, 9, 55)


def summary(*candidates: DrainCandidate) -> AnalysisSummary:
    return AnalysisSummary(
        run_id="r", window_start=T0 - timedelta(days=1), window_end=T0 + timedelta(hours=12), bucket_seconds=300,
        sample_interval_seconds=300, fact_source="store", ge_hours_by_state={}, cost_usd_by_state={},
        idle_by_tenant=(), stranded_ge_hours=0.0, top_risk_tenants=(), drain_candidates=candidates, warn_gpus=0,
        fleet_cost_usd=Decimal(0), chargeback_total_usd=Decimal(0),
    )


def test_watch_and_warned_failures_are_printed_with_trend_start_and_lead() -> None:
    failed = DrainCandidate("node-a", "GPU-A", "XID 48 x1: drain-class", "drain", T0, T0 + timedelta(hours=4.5),
                            4.6 * 3600)
    watched = DrainCandidate("node-b", "GPU-B", "PCIe replays rising", "watch", T0 + timedelta(hours=1),
                             T0 + timedelta(hours=2), None)
    hard = DrainCandidate("node-c", "GPU-C", "XID 79 x1: drain-class")
    text = summary(failed, watched, hard).render()
    assert "drain candidates: 3 GPU(s) (1 on early warning only)" in text
    assert "early warnings: 1 GPU(s) warned before they failed, lead 4.6 h" in text
    assert "GPU-A [drain] trend since 11-30 09:55, warned 11-30 14:25, 4.6 h before the failure: XID 48" in text
    assert "GPU-B [watch] trend since 11-30 10:55, warned 11-30 11:55, not failed (yet): PCIe" in text
    assert "GPU-C [drain]: XID 79" in text


def test_without_a_warned_failure_no_lead_is_claimed() -> None:
    text = summary(DrainCandidate("n", "G", "XID 79 x1: drain-class")).render()
    assert "early warnings:" not in text and "before the failure" not in text
