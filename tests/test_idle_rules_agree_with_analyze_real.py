"""One idle: the recording rule ``tenant:gpulens_idle_gpu_equivalents:sum``, evaluated by a REAL Prometheus
over a simulated fleet's history, and ``gpulens analyze`` over the same history agree on idle GE-hours.

The history: three hours of two nodes scraped every minute (tests/support/synthetic_fleet: per node, one
tenant holds a 3g.71gb and a 1g.18gb MIG instance and a whole H100; one 1g.18gb is free), as TSDB blocks written by promtool from
OpenMetrics. Activity cycles per device through idle (0.01), exactly the threshold (0.05: active) and busy
(0.6); the 3g.71gb has no reading for its first hour (unmeasured, never idle). The rule is recorded by
the backfill path of recording rules (``promtool tsdb create-blocks-from rules``, the real rule engine at
the group's own interval); the store is collected from the same Prometheus and analysed.
"""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
import yaml

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from collector.prometheus import HttpSettings, PrometheusClient, collect_range
from collector.store import Store
from tests.support.prometheus import PrometheusServer, promtool, require_binary, running_prometheus
from tests.support.store_render import render_openmetrics, series_for
from tests.support.synthetic_fleet import synthetic_frames

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
RULES_FILE = ROOT / "deploy" / "prometheus" / "gpulens-rules.yaml"
IDLE_RECORD = "tenant:gpulens_idle_gpu_equivalents:sum"
HOURS = 3
START = int(time.time() // 3600) * 3600 - 8 * 3600  # recent enough for the TSDB head and retention
END = START + HOURS * 3600
# Each evaluation reads the one scrape of the minute before it (scrapes every 60 s): every sample is
# seen by exactly one evaluation of a 1-minute group, as every sample is one interval in analyze.
PROM_ARGS = ["--query.lookback-delta=60s", "--storage.tsdb.retention.time=100y"]


def _fleet() -> dict[str, pl.DataFrame]:
    frames = synthetic_frames(START, END, 60, nodes=2, whole_gpus=1, seed=11)
    minute = (pl.col("ts").dt.epoch("s") - START) // 60
    rank = pl.col("device_id").rank("dense").over("ts").cast(pl.Int64)
    phase = (minute + rank) % 3
    mig3 = frames["devices"].filter(pl.col("profile") == "3g.71gb")["device_id"].to_list()
    activity = pl.when(phase == 0).then(0.01).when(phase == 1).then(0.05).otherwise(0.6)
    samples = frames["device_samples"].with_columns(
        activity_ratio=pl.when(pl.col("device_id").is_in(mig3) & (minute < 60)).then(None).otherwise(activity)
    )
    return {**frames, "device_samples": samples}


def _idle_rule_file(tmp: Path) -> tuple[Path, int]:
    """The shipped idle record alone, in its group and at its interval (a backfill records every rule of a
    file, and a record that reads other records cannot be backfilled); returns the file and the interval."""
    groups = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))["groups"]
    group = next(g for g in groups if any(r.get("record") == IDLE_RECORD for r in g["rules"]))
    interval = str(group["interval"])
    assert interval.endswith("m"), interval
    rule = next(r for r in group["rules"] if r.get("record") == IDLE_RECORD)
    path = tmp / "idle-rule.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": group["name"], "interval": interval, "rules": [rule]}]}),
                    encoding="utf-8")
    return path, int(interval[:-1]) * 60


def _wait_for_history(prom: PrometheusServer, at: float, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not prom.query('count({__name__=~".+"})', at=at):
        assert time.monotonic() < deadline, f"the served history never answered:\n{prom.log()[-3000:]}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def idle_hours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Idle GE-hours per tenant from the rule in Prometheus and from analyze, over the same history."""
    require_binary("prometheus")
    require_binary("promtool")
    tmp = tmp_path_factory.mktemp("idle-rules")
    source = tmp / "history.om"
    source.write_text(render_openmetrics(series_for(_fleet(), "gpulens")), encoding="utf-8")
    raw = tmp / "tsdb-raw"
    code, output = promtool("tsdb", "create-blocks-from", "openmetrics", str(source), str(raw), timeout=120)
    assert code == 0, output
    rules, interval = _idle_rule_file(tmp)
    recorded = tmp / "tsdb-rules"
    with running_prometheus(data_dir=tmp / "prom-raw", storage_path=raw, extra_args=PROM_ARGS) as prom:
        _wait_for_history(prom, END - 60)
        code, output = promtool("tsdb", "create-blocks-from", "rules", f"--start={START - 600}",
                                f"--end={END + 600}", f"--url={prom.url}", f"--output-dir={recorded}", str(rules),
                                timeout=120)
        assert code == 0, output
        assert recorded.is_dir() and any(recorded.iterdir()), f"the backfill wrote no block:\n{output[-2000:]}"
    both = tmp / "tsdb-both"
    shutil.copytree(raw, both)
    for block in recorded.iterdir():
        shutil.copytree(block, both / block.name)
    db = tmp / "store.duckdb"
    span = f"{HOURS * 3600 + 1200}s"
    with running_prometheus(data_dir=tmp / "prom-both", storage_path=both, extra_args=PROM_ARGS) as prom:
        _wait_for_history(prom, END - 60)
        answer = prom.query(f"sum by (tenant) (sum_over_time({IDLE_RECORD}[{span}]))", at=END + 600)
        with Store(str(db)) as store, PrometheusClient(HttpSettings(prom.url)) as client:
            collect_range(store, client, start=START, end=END, step=60, schema="gpulens")
    rule = {r["metric"]["tenant"]: float(r["value"][1]) * interval / 3600 for r in answer}
    settings = AnalysisSettings.model_validate({
        "window_seconds": HOURS * 3600, "bucket_seconds": 3600,
        "end": datetime.fromtimestamp(END, UTC).replace(tzinfo=None)})
    run_id = analyze(db, settings).run_id
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT tenant, state, sum(ge_hours) FROM idle_capacity WHERE run_id = ? AND tenant IS NOT NULL "
            "GROUP BY ALL", [run_id]).fetchall()
    by_state: dict[str, dict[str, float]] = {}
    for tenant, state, hours in rows:
        by_state.setdefault(state, {})[tenant] = float(hours)
    return {"rule": rule, "analyze": by_state}


def test_idle_ge_hours_of_the_recording_rule_agree_with_analyze_within_two_percent(
    idle_hours: dict[str, Any],
) -> None:
    rule, analyzed = idle_hours["rule"], idle_hours["analyze"]["allocated-idle"]
    assert set(rule) == set(analyzed) == {"team-0", "team-1"}
    for tenant, hours in analyzed.items():
        # A third of the held, measured sample-time is idle: 1/3 x (1 + 1/7) x 3 h + 1/3 x 3/7 x 2 h.
        assert hours == pytest.approx((1 + 1 / 7) + 2 / 7, rel=1e-6), tenant
        assert rule[tenant] == pytest.approx(hours, rel=0.02), tenant
    assert sum(rule.values()) == pytest.approx(sum(analyzed.values()), rel=0.02)


def test_the_unmeasured_hour_is_charged_as_unmeasured_and_counted_idle_by_neither(
    idle_hours: dict[str, Any],
) -> None:
    """The 3g.71gb's hour without readings is unmeasured in analyze; had the rule counted it idle (as
    allocated x (1 - activity) does with no activity, or as a rule that treats absent as 0), the idle
    totals above would differ by far more than 2 %."""
    assert idle_hours["analyze"]["allocated-unmeasured"] == pytest.approx({"team-0": 3 / 7, "team-1": 3 / 7}, rel=1e-6)
