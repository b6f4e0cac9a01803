"""Against a REAL Prometheus and its real rule engine: `collect --prometheus --rollups` reads the 5-minute
rollups of deploy/prometheus and the analysis of them agrees with collecting the raw series at 60 s.

The history: raw TSDB blocks (promtool, from OpenMetrics) of one node, scraped every minute, three
hours plus a span on each side. The rollups are recorded from it by the backfill path of recording
rules (``promtool tsdb create-blocks-from rules``), which evaluates the group at its own offset in
the 5 minutes, as a Prometheus, Thanos Ruler or Mimir ruler does: a first, tiny backfill finds that
offset, and the history is laid out on the ruler's spans (scrapes never on an evaluation time). The
raw and rollup blocks are then served by one Prometheus.

Devices (activity constant within each rollup span and periodic over the 3 hours, unless said):
- ``h1``: whole H100, team-a, then team-b (the holder changes between two spans);
- ``h2``: whole H100, team-c; **bursty**: busy (0.9) and idle (0) in alternate minutes, no memory
  reading (an older exporter);
- ``mig3``: 3g.71gb, team-a, its samples missing for two whole spans (a 10-minute gap);
- ``g9``: 1g.18gb, team-b until the middle of span 12 (a change inside 5 minutes), free, then team-c;
- ``g10``: 1g.18gb, team-d all the time.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
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
from collector.prometheus_rollups import ROLLUP_GROUP
from collector.store import Store
from tests.support.prometheus import PrometheusServer, promtool, require_binary, running_prometheus
from tests.support.store_render import render_openmetrics, series_for
from tests.support.synthetic_fleet import synthetic_frames

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
RULES_FILE = ROOT / "deploy" / "prometheus" / "gpulens-rules.yaml"
SPAN = 300
HOURS = 3
SPANS = HOURS * 3600 // SPAN
START = int(time.time() // 3600) * 3600 - 8 * 3600  # recent enough for the TSDB head and retention
END = START + HOURS * 3600
# A raw row reads the last scrape (under 60 s old); a missing scrape is not bridged by an older one.
PROM_ARGS = ["--query.lookback-delta=60s", "--storage.tsdb.retention.time=100y"]
THRESHOLD = 0.05
TENANTS = ("team-a", "team-b", "team-c", "team-d")
GE_3G = 3 / 7
GE_1G = 1 / 7


def scrape_offset(phase: float) -> int:
    """Seconds past the minute of every scrape: away from the minute (the raw step) and from the ruler's
    evaluation times, so that each rollup span holds exactly five scrapes."""
    for offset in (15, 25, 35, 45):
        if min(abs(offset - phase % 60), 60 - abs(offset - phase % 60)) >= 8:
            return offset
    raise AssertionError(phase)


def fleet(phase: float) -> tuple[dict[str, pl.DataFrame], dict[str, str]]:
    """The store frames of the history above for a ruler evaluating at ``phase`` seconds into each 5 minutes,
    and the device ids by role."""
    offset = scrape_offset(phase)
    frames = synthetic_frames(START - 2 * SPAN + offset, END + 2 * SPAN + offset, 60, nodes=1, whole_gpus=2)
    devices = frames["devices"].sort("device_id")
    whole = devices.filter(pl.col("profile") == "gpu")["device_id"].to_list()
    role = {
        "h1": whole[0],
        "h2": whole[1],
        "mig3": devices.filter(pl.col("profile") == "3g.71gb")["device_id"][0],
        "g9": devices.filter(pl.col("gpu_instance_id") == 9)["device_id"][0],
        "g10": devices.filter(pl.col("gpu_instance_id") == 10)["device_id"][0],
    }
    # A scrape's position in rollup spans: span k (the record evaluated at START + phase + k*SPAN) holds
    # the scrapes with k - 1 < pos <= k.
    pos = (pl.col("ts").dt.epoch("s") - START - phase) / SPAN
    span = pos.ceil().cast(pl.Int64)
    rank = pl.col("device_id").rank("dense").cast(pl.Int64)
    # Constant within each span, idle in one span of three (shifted per device), periodic over the window.
    blocky = pl.when((span % SPANS + rank) % 3 == 0).then(0.01).otherwise(0.6)
    bursty = pl.when(((pl.col("ts").dt.epoch("s") - START) // 60) % 2 == 1).then(0.9).otherwise(0.0)
    samples = frames["device_samples"].with_columns(
        activity_ratio=pl.when(pl.col("device_id") == role["h2"]).then(bursty).otherwise(blocky),
        memory_used_bytes=pl.when(pl.col("device_id") == role["h2"]).then(None).otherwise(pl.col("memory_used_bytes")),
    ).filter(~((pl.col("device_id") == role["mig3"]) & span.is_between(24, 25)))
    holders = pl.DataFrame([
        (role["h1"], "team-a", "a-1", -99.0, 18.0), (role["h1"], "team-b", "b-1", 18.0, 99.0),
        (role["mig3"], "team-a", "a-2", -99.0, 99.0),
        (role["g9"], "team-b", "b-2", -99.0, 12.5), (role["g9"], "team-c", "c-1", 20.0, 99.0),
        (role["h2"], "team-c", "c-2", -99.0, 99.0),
        (role["g10"], "team-d", "d-1", -99.0, 99.0),
    ], schema=["device_id", "tenant", "pod", "from_pos", "to_pos"], orient="row")
    grid = frames["device_samples"].select("ts", "node", "gpu_uuid", "device_id").join(
        devices.select("device_id", "sharing_mode", "gpu_equivalents"), on="device_id")
    allocations = (
        grid.join(holders, on="device_id")
        .filter((pos > pl.col("from_pos")) & (pos <= pl.col("to_pos")))
        .select("ts", "node", "gpu_uuid", "device_id", pl.col("tenant").alias("namespace"), "pod",
                pl.lit("main").alias("container"), "tenant", "sharing_mode", "gpu_equivalents",
                pl.lit("Job").alias("workload_kind"), pl.col("pod").alias("workload_name"),
                pl.lit("synthetic").alias("source"))
    )
    return {**frames, "device_samples": samples, "allocations": allocations}, role


def _rollup_rules(tmp: Path) -> Path:
    """The rollup group of the shipped rules file, alone (the backfill records every rule of a file)."""
    groups = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))["groups"]
    path = tmp / "rollup-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [g for g in groups if g["name"] == ROLLUP_GROUP]}), encoding="utf-8")
    return path


def _blocks(tmp: Path, name: str, frames: dict[str, pl.DataFrame]) -> Path:
    source = tmp / f"{name}.om"
    source.write_text(render_openmetrics(series_for(frames, "gpulens")), encoding="utf-8")
    out = tmp / f"tsdb-{name}"
    code, output = promtool("tsdb", "create-blocks-from", "openmetrics", str(source), str(out), timeout=120)
    assert code == 0, output
    return out


def _backfill(prom: PrometheusServer, rules: Path, start: float, end: float, out: Path) -> None:
    """Record the rules over ``[start, end]`` from ``prom`` into blocks (the real rule engine).

    The served history must answer first: a backfill over an empty answer exits 0 and writes no block.
    """
    _wait_for_history(prom, end)
    code, output = promtool("tsdb", "create-blocks-from", "rules", f"--start={start:.0f}", f"--end={end:.0f}",
                            f"--url={prom.url}", f"--output-dir={out}", str(rules), timeout=120)
    assert code == 0, output
    assert out.is_dir() and any(out.iterdir()), f"the backfill wrote no block:\n{output[-2000:]}\n{prom.log()[-2000:]}"


def _wait_for_history(prom: PrometheusServer, end: float, timeout: float = 60.0) -> None:
    """Wait until the blocks under ``prom`` answer a query at ``end`` (a loaded TSDB can lag its readiness)."""
    deadline = time.monotonic() + timeout
    while not prom.query('count({__name__=~".+"})', at=end - SPAN):
        assert time.monotonic() < deadline, f"the served history never answered:\n{prom.log()[-3000:]}"
        time.sleep(0.5)


def _probe(tmp: Path, rules: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    """The ruler's evaluation offset in the 5 minutes (a backfill of a tiny history), and ``collect --rollups``
    against a Prometheus where the rules are not deployed."""
    frames = synthetic_frames(START - SPAN, START + 2 * SPAN, 60, nodes=1, whole_gpus=0)
    frames = {k: v for k, v in frames.items() if k not in ("allocations", "gpu_samples")}
    probe = _blocks(tmp, "probe", frames)
    with running_prometheus(data_dir=tmp / "prom-probe", storage_path=probe, extra_args=PROM_ARGS) as prom:
        failure = _cli("collect", "--prometheus", prom.url, "--rollups", "--start", str(START), "--end", str(END),
                       "--db", str(tmp / "not-deployed.duckdb"))
        _backfill(prom, rules, START, START + SPAN, tmp / "tsdb-probe-rules")
    dump_dir = tmp / "probe-dump"
    shutil.copytree(tmp / "tsdb-probe-rules", dump_dir)
    (dump_dir / "wal").mkdir()
    code, output = promtool("tsdb", "dump", str(dump_dir))
    assert code == 0, output
    times = sorted(int(line.rsplit(" ", 1)[1]) for line in output.splitlines() if "device:gpulens_device_activity_ratio" in line)
    assert times, output[-2000:]
    return (times[0] / 1000 - START) % SPAN, failure


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpulens.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Raw and rollup collections of the same history, each analysed over the 3 hours."""
    require_binary("prometheus")
    require_binary("promtool")
    tmp = tmp_path_factory.mktemp("rollups")
    rules = _rollup_rules(tmp)
    phase, failure = _probe(tmp, rules)
    print(f"ruler offset {phase:.3f} s, scrape offset {scrape_offset(phase)} s")
    frames, role = fleet(phase)
    raw_blocks = _blocks(tmp, "raw", frames)
    with running_prometheus(data_dir=tmp / "prom-raw", storage_path=raw_blocks, extra_args=PROM_ARGS) as prom:
        _backfill(prom, rules, START - SPAN, END + SPAN, tmp / "tsdb-rules")
    both = tmp / "tsdb-both"
    shutil.copytree(raw_blocks, both)
    for block in (tmp / "tsdb-rules").iterdir():
        shutil.copytree(block, both / block.name)
    raw_db, roll_db = tmp / "raw.duckdb", tmp / "rollup.duckdb"
    with running_prometheus(data_dir=tmp / "prom-both", storage_path=both, extra_args=PROM_ARGS) as prom:
        with Store(str(raw_db)) as store, PrometheusClient(HttpSettings(prom.url)) as client:
            collect_range(store, client, start=START, end=END, step=60, schema="gpulens")
        rolled = _cli("collect", "--prometheus", prom.url, "--rollups", "--start", str(START), "--end", str(END),
                      "--schema", "gpulens", "--db", str(roll_db))
        assert rolled.returncode == 0, rolled.stderr
        again = _cli("collect", "--prometheus", prom.url, "--rollups", "--start", str(START), "--end", str(END),
                     "--schema", "gpulens", "--db", str(roll_db))
        assert again.returncode == 0, again.stderr
    settings = AnalysisSettings.model_validate({
        "window_seconds": HOURS * 3600, "bucket_seconds": 3600, "end": datetime.fromtimestamp(END, UTC).replace(
            tzinfo=None), "activity_threshold": THRESHOLD})
    runs = {name: analyze(db, settings).run_id for name, db in (("raw", raw_db), ("rollup", roll_db))}
    return {"tmp": tmp, "role": role, "raw": raw_db, "rollup": roll_db, "runs": runs, "failure": failure,
            "again": again, "phase": phase}


def hours(world: dict[str, Any], which: str, by: str, where: str = "TRUE") -> dict[tuple[Any, ...], float]:
    """GE-hours of a run grouped ``by`` (SQL columns of idle_capacity)."""
    with duckdb.connect(str(world[which]), read_only=True) as con:
        rows = con.execute(
            f"SELECT {by}, sum(ge_hours) FROM idle_capacity WHERE run_id = ? AND {where} GROUP BY ALL",  # noqa: S608
            [world["runs"][which]],
        ).fetchall()
    return {tuple(r[:-1]): float(r[-1]) for r in rows}


def test_the_rollup_collection_writes_a_fifth_of_the_rows_logged_under_its_own_source(world: dict[str, Any]) -> None:
    with duckdb.connect(str(world["raw"]), read_only=True) as raw, \
            duckdb.connect(str(world["rollup"]), read_only=True) as roll:
        raw_n = raw.execute("SELECT count(*) FROM device_samples").fetchone()
        roll_n = roll.execute("SELECT count(*) FROM device_samples").fetchone()
        assert raw_n is not None and roll_n is not None
        assert roll_n[0] * 5 == pytest.approx(raw_n[0], abs=5 * 5 * 2)  # the gap edges differ by a point or two
        sources = roll.execute("SELECT DISTINCT source FROM ingest_batches").fetchall()
        assert [s[0].split(":")[0] for s in sources] == ["prometheus-rollup"]
        assert roll.execute("SELECT DISTINCT source FROM device_samples").fetchall() == [("prometheus-rollup",)]
        # Rows at the start of the span their rollup covers: on the 5-minute grid, from START on.
        first, last = roll.execute("SELECT min(ts), max(ts) FROM device_samples").fetchone() or (None, None)
        assert (first, last) == (datetime.fromtimestamp(START, UTC).replace(tzinfo=None),
                                 datetime.fromtimestamp(END - SPAN, UTC).replace(tzinfo=None))
        assert roll.execute("SELECT count(*) FROM device_samples WHERE epoch(ts) % 300 <> 0").fetchone() == (0,)
    # The same span again: every window is found complete under the rollup source and nothing is queried.
    assert "0 windows written (0 new rows), 1 already stored" in world["again"].stderr


def test_allocated_ge_hours_per_tenant_agree_within_one_point_per_holder_change(world: dict[str, Any]) -> None:
    raw = hours(world, "raw", "tenant", "tenant IS NOT NULL")
    roll = hours(world, "rollup", "tenant", "tenant IS NOT NULL")
    assert set(raw) == set(roll) == {(t,) for t in TENANTS}
    point = SPAN / 3600
    changes = {"team-a": 1 * 1.0, "team-b": 1 * 1.0 + 1 * GE_1G, "team-c": 1 * GE_1G, "team-d": 0.0}
    for tenant, ge_points in changes.items():
        assert roll[(tenant,)] == pytest.approx(raw[(tenant,)], abs=ge_points * point + 1e-9), (tenant, world["phase"])
    assert roll[("team-d",)] == pytest.approx(HOURS * GE_1G, rel=1e-9)


def test_idle_ge_hours_agree_where_activity_is_constant_within_each_5_minutes(world: dict[str, Any]) -> None:
    role = world["role"]
    steady = f"device_id IN ('{role['g10']}', '{role['mig3']}')"
    raw = hours(world, "raw", "tenant, state", steady)
    roll = hours(world, "rollup", "tenant, state", steady)
    assert raw.keys() == roll.keys(), world["phase"]
    for key, value in raw.items():
        assert roll[key] == pytest.approx(value, rel=1e-9, abs=1e-9), (key, world["phase"])
    # The 10 missing minutes of mig3 are unknown time in both (no tenant), never idle.
    assert raw[(None, "unknown")] == pytest.approx(10 / 60 * GE_3G)
    # Over every device, a tenant's idle differs by at most one point per holder change.
    not_bursty = f"state = 'allocated-idle' AND device_id <> '{role['h2']}'"
    raw_all = hours(world, "raw", "tenant", not_bursty)
    roll_all = hours(world, "rollup", "tenant", not_bursty)
    for tenant, ge_points in {"team-a": 1.0, "team-b": 1.0 + GE_1G, "team-c": GE_1G, "team-d": 0.0}.items():
        assert roll_all.get((tenant,), 0.0) == pytest.approx(raw_all.get((tenant,), 0.0),
                                                             abs=ge_points * SPAN / 3600 + 1e-9), tenant


def test_a_bursty_device_is_decided_by_its_5_minute_mean(world: dict[str, Any]) -> None:
    """Busy in alternate minutes: raw, half its held time is idle; each rollup point's mean (0.36 or
    0.54) is above the threshold, so from rollups all of it is active."""
    h2 = f"device_id = '{world['role']['h2']}'"
    raw = hours(world, "raw", "state", h2)
    roll = hours(world, "rollup", "state", h2)
    assert raw[("allocated-idle",)] == pytest.approx(HOURS / 2, abs=1 / 60)
    assert raw[("allocated-active",)] == pytest.approx(HOURS / 2, abs=1 / 60)
    assert ("allocated-idle",) not in roll
    assert roll[("allocated-active",)] == pytest.approx(HOURS)


def test_rules_not_deployed_fail_naming_the_series_and_write_nothing(world: dict[str, Any]) -> None:
    failure = world["failure"]
    assert failure.returncode == 2
    lines = failure.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpulens: error: --rollups: ")
    assert "device:gpulens_device_activity_ratio:avg5m" in lines[0] and "deploy/prometheus" in lines[0]
    with duckdb.connect(str(world["tmp"] / "not-deployed.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM ingest_batches").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM device_samples").fetchone() == (0,)


def test_rollups_with_a_step_other_than_5_minutes_is_refused_before_any_request(tmp_path: Path) -> None:
    result = _cli("collect", "--prometheus", "http://127.0.0.1:9", "--rollups", "--step", "60s", "--start",
                  _iso(START), "--db", str(tmp_path / "s.duckdb"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "gpulens: error: --rollups reads the 5-minute rollups recorded by deploy/prometheus: use --step 5m "
        "(got --step 60s), or collect the raw series without --rollups"]


def test_dcgm_exporter_rollups_land_in_the_same_tables_with_means_peaks_and_the_memory_size(
    world: dict[str, Any],
) -> None:
    """dcgm-exporter's names, one hour of a whole H100: a rollup point holds the span's mean activity and
    power, its peak memory used and temperature, and the memory size (peak used + lowest free + reserved)."""
    tmp, phase = world["tmp"], world["phase"]
    offset = scrape_offset(phase)
    start, end = START, START + 3600
    frames = synthetic_frames(start - 2 * SPAN + offset, end + 2 * SPAN + offset, 60, nodes=1, whole_gpus=1, seed=3)
    source = tmp / "dcgm.om"
    source.write_text(render_openmetrics(series_for(frames, "dcgm")), encoding="utf-8")
    blocks = tmp / "tsdb-dcgm"
    code, out = promtool("tsdb", "create-blocks-from", "openmetrics", str(source), str(blocks), timeout=120)
    assert code == 0, out
    with running_prometheus(data_dir=tmp / "prom-dcgm", storage_path=blocks, extra_args=PROM_ARGS) as prom:
        # The same rules file (path) as the probe, so the same evaluation offset.
        _backfill(prom, tmp / "rollup-rules.yaml", start - SPAN, end + SPAN, tmp / "tsdb-dcgm-rules")
    for block in (tmp / "tsdb-dcgm-rules").iterdir():
        shutil.copytree(block, blocks / block.name)
    db = tmp / "dcgm.duckdb"
    with running_prometheus(data_dir=tmp / "prom-dcgm-2", storage_path=blocks, extra_args=PROM_ARGS) as prom:
        with Store(str(db)) as store, PrometheusClient(HttpSettings(prom.url)) as client:
            collect_range(store, client, start=start, end=end, step=SPAN, schema="dcgm", rollups=True)
            got = store.frame("SELECT ts, activity_ratio, memory_used_bytes, memory_total_bytes FROM device_samples "
                              "WHERE device_id NOT LIKE '%/gi%' ORDER BY ts")
            h100 = frames["devices"].filter(pl.col("profile") == "gpu")
            power = store.frame("SELECT ts, power_watts, temperature_celsius FROM gpu_samples WHERE gpu_uuid = ? "
                                "ORDER BY ts", [h100["gpu_uuid"][0]])
    truth = (
        frames["device_samples"].join(h100.select("device_id"), on="device_id")
        .join(frames["gpu_samples"].select("gpu_uuid", "ts", "power_watts", "temperature_celsius"),
              on=["gpu_uuid", "ts"])
        # The record evaluated at START + phase + k*SPAN covers the scrapes with k-1 < pos <= k; it is
        # stored at the grid point before it.
        .with_columns(k=((pl.col("ts").dt.epoch("s") - START - phase) / SPAN).ceil().cast(pl.Int64))
        .group_by("k").agg(activity_ratio=pl.col("activity_ratio").mean(),
                           memory_used_bytes=pl.col("memory_used_bytes").max(),
                           memory_total_bytes=pl.col("memory_total_bytes").first(),
                           power_watts=pl.col("power_watts").mean(),
                           temperature_celsius=pl.col("temperature_celsius").max())
        .with_columns(ts=pl.from_epoch(START + ((phase + pl.col("k") * SPAN) / SPAN).ceil().cast(pl.Int64) * SPAN
                                       - SPAN, time_unit="s").cast(pl.Datetime("us")))
        .filter((pl.col("ts").dt.epoch("s") >= start) & (pl.col("ts").dt.epoch("s") < end))
        .sort("ts")
    )
    assert got.height == truth.height == 12
    assert got["ts"].to_list() == truth["ts"].to_list()
    assert got["activity_ratio"].to_list() == pytest.approx(truth["activity_ratio"].to_list(), rel=1e-9)
    # MiB back to bytes: within a byte of the truth's peak, and the size exact to the MiB rounding.
    assert got["memory_used_bytes"].to_list() == pytest.approx(truth["memory_used_bytes"].to_list(), abs=1)
    assert got["memory_total_bytes"].to_list() == pytest.approx(truth["memory_total_bytes"].to_list(), abs=1)
    assert power["power_watts"].to_list() == pytest.approx(truth["power_watts"].to_list(), rel=1e-9)
    assert power["temperature_celsius"].to_list() == pytest.approx(truth["temperature_celsius"].to_list())
