"""The rollup table of the collector and the rollup rule group of deploy/prometheus are one contract."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import polars as pl
import yaml

from collector.mapping import DCGM_METRICS, GPULENS_METRICS
from collector.prometheus_rollups import (
    ROLLUP_GROUP,
    ROLLUP_INTERVAL_SECONDS,
    ROLLUPS,
    drop_unread_device_rows,
    query_name,
)
from gpulens.core.metric_catalog import BY_NAME, MetricType

ROOT = Path(__file__).resolve().parents[1]
RULES_FILE = ROOT / "deploy" / "prometheus" / "gpulens-rules.yaml"


def rollup_group() -> dict[str, object]:
    groups = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))["groups"]
    (group,) = [g for g in groups if g["name"] == ROLLUP_GROUP]
    return group  # type: ignore[no-any-return]


def test_the_rule_group_records_exactly_the_collectors_rollups_every_5_minutes() -> None:
    group = rollup_group()
    assert group["interval"] == "5m" and ROLLUP_INTERVAL_SECONDS == 300
    rules = [(rule["record"], rule["expr"].strip()) for rule in group["rules"]]  # type: ignore[attr-defined]
    assert rules == [(r.record, r.expr) for r in ROLLUPS]


def test_rollups_keep_every_label_of_their_source_series() -> None:
    """Both shipped forms (the rules file, the PrometheusRule the operator loads) record each rollup as a
    bare ``*_over_time`` of its base series: no aggregation that would drop a label."""
    shipped = yaml.safe_load((ROOT / "deploy" / "base" / "prometheusrule.yaml").read_text(encoding="utf-8"))
    (operator_group,) = [g for g in shipped["spec"]["groups"] if g["name"] == ROLLUP_GROUP]
    by_base = {r.record: r for r in ROLLUPS}
    for group in (rollup_group(), operator_group):
        for rule in group["rules"]:  # type: ignore[attr-defined]
            expr, rollup = rule["expr"].strip(), by_base[rule["record"]]
            assert " by " not in expr and " without " not in expr and not expr.startswith(("sum", "avg(", "max(")), expr
            assert expr == f"{rollup.function}({rollup.base}[5m])", expr


def test_only_gauges_the_collector_reads_are_rolled_up_and_allocations_are_read_raw() -> None:
    for rollup in ROLLUPS:
        assert rollup.base in GPULENS_METRICS or rollup.base in DCGM_METRICS, rollup.base
        spec = BY_NAME.get(rollup.base)
        assert spec is None or spec.type is MetricType.GAUGE, rollup.base
    assert query_name("gpulens_allocation_gpu_equivalents") == "gpulens_allocation_gpu_equivalents"
    assert query_name("gpulens_gpu_energy_joules_total") == "gpulens_gpu_energy_joules_total"
    assert query_name("gpulens_device_activity_ratio") == "device:gpulens_device_activity_ratio:avg5m"


def test_the_collector_cronjob_reads_the_rollups_that_the_shipped_prometheusrule_records() -> None:
    cronjob = yaml.safe_load((ROOT / "deploy" / "base" / "collector-cronjob.yaml").read_text(encoding="utf-8"))
    args = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["initContainers"][0]["args"]
    assert "--rollups" in args and "--step=5m" in args
    shipped = yaml.safe_load((ROOT / "deploy" / "base" / "prometheusrule.yaml").read_text(encoding="utf-8"))
    assert ROLLUP_GROUP in {group["name"] for group in shipped["spec"]["groups"]}
    kustomization = yaml.safe_load((ROOT / "deploy" / "base" / "kustomization.yaml").read_text(encoding="utf-8"))
    assert {"prometheusrule.yaml", "collector-cronjob.yaml"} <= set(kustomization["resources"])


def test_a_device_whose_rollups_are_missing_in_a_span_has_no_row_there_unless_it_never_has_readings() -> None:
    """Rows made only by the series read raw at the step (GE, memory size) are a scrape gap of a device
    with readings elsewhere (unknown), and stay for a device that never reports them (unmeasured)."""
    t = [datetime(2026, 12, 1, 0, m) for m in (0, 5, 10)]
    rows = pl.DataFrame({
        "ts": t * 3,
        "device_id": ["gpu"] * 3 + ["a100-mig"] * 3 + ["ci-without-memory"] * 3,
        "activity_ratio": [0.5, None, 0.7, None, None, None, None, None, None],
        "memory_used_bytes": [1, None, 2, 10, None, 11, None, None, None],
        "memory_total_bytes": [80] * 9,
    })
    kept = drop_unread_device_rows(rows)
    assert kept.select("device_id", pl.col("ts").dt.minute()).rows() == [
        ("gpu", 0), ("gpu", 10), ("a100-mig", 0), ("a100-mig", 10),
        ("ci-without-memory", 0), ("ci-without-memory", 5), ("ci-without-memory", 10),
    ]
