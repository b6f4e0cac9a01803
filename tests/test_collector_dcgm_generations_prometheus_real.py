"""Against a REAL Prometheus: dcgm-exporter targets of both generations, collected through query_range, land
as the same rows, and the collection says which generation each target (instance) spoke."""

from __future__ import annotations

import time
from pathlib import Path

import polars as pl
import pytest

from collector.dcgm_generation import PRE_4_9, V4_9_OR_LATER
from collector.exposition import parse_exposition
from collector.prometheus import HttpSettings, PrometheusClient, collect_range
from collector.store import Store
from tests.support.prometheus import promtool, running_prometheus
from tests.test_collector_dcgm_generations import NEW, NOT_NAMED_BY_THE_TABLE, PRE

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

STEP = 60.0
START = (time.time() // 3600) * 3600 - 3 * 3600
END = START + 10 * STEP
OLD_UUID, NEW_UUID = "5f1c2a90", "6e2d3b01"


def _openmetrics(path: Path, instance: str, uuid_part: str) -> list[str]:
    """Every sample of a fixture at every step, as a series of target ``instance`` (GPU UUIDs made its own)."""
    long = parse_exposition(path.read_text().replace(OLD_UUID, uuid_part))
    labels = [c for c in long.columns if c not in ("metric", "value", "ts_ms")]
    lines = []
    for row in long.iter_rows(named=True):
        pairs = [f'{k}="{row[k]}"' for k in labels if row[k] is not None] + [f'instance="{instance}"',
                                                                              'job="dcgm-exporter"']
        for k in range(10):
            lines.append(f"{row['metric']}{{{','.join(pairs)}}} {row['value']} {START + k * STEP:.0f}")
    return lines


def test_both_generations_through_prometheus_land_as_the_same_rows_and_each_target_says_its_generation(
        tmp_path: Path, promtool_binary: str, prometheus_binary: str) -> None:
    lines = _openmetrics(PRE, "old-node:9400", OLD_UUID) + _openmetrics(NEW, "new-node:9400", NEW_UUID)
    by_metric: dict[str, list[str]] = {}
    for line in lines:
        by_metric.setdefault(line.split("{", 1)[0], []).append(line)
    text = "".join(f"# TYPE {m} gauge\n" + "\n".join(sorted(ls)) + "\n" for m, ls in sorted(by_metric.items()))
    (tmp_path / "dcgm.om").write_text(text + "# EOF\n", encoding="utf-8")
    code, output = promtool("tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "dcgm.om"),
                            str(tmp_path / "tsdb"), timeout=120)
    assert code == 0, output
    args = ["--query.lookback-delta=30s", "--storage.tsdb.retention.time=100y"]
    with (
        running_prometheus(data_dir=tmp_path / "prom", storage_path=tmp_path / "tsdb", extra_args=args) as prom,
        PrometheusClient(HttpSettings(prom.url)) as client,
        Store(str(tmp_path / "g.duckdb")) as store,
    ):
        summary = collect_range(store, client, start=START, end=END, step=STEP, schema="dcgm")
        # Only the fields gpulens reads are queried, and 4.10 renamed none of them: 4.9 or later.
        assert summary.speaks == (f"target new-node:9400: speaks {V4_9_OR_LATER}",
                                  f"target old-node:9400: speaks {PRE_4_9}")
        assert summary.naming_warnings == ()
        drop = list(NOT_NAMED_BY_THE_TABLE["device_samples"])
        rows = store.frame("SELECT * EXCLUDE (source) FROM device_samples ORDER BY device_id, ts")
    old = rows.filter(pl.col("gpu_uuid").str.contains(OLD_UUID)).drop(drop)
    new = rows.filter(pl.col("gpu_uuid").str.contains(NEW_UUID)).drop(drop).with_columns(
        pl.col("gpu_uuid", "device_id").str.replace(NEW_UUID, OLD_UUID))
    assert old.height == 3 * 10
    assert old.equals(new)
