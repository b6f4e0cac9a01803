"""Against a REAL Prometheus: the edges of a collection. Every step before --end is queried (the last one
too when --end is off the step grid), re-collecting a span replaces its gaps, impossible values in a
query_range answer become NULL without sinking the run, and the not-yet-final last minute is named."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.prometheus import HttpSettings, PrometheusClient, collect_range
from collector.store import Store
from tests.support.cli import assert_one_line_error, gpulens
from tests.support.prometheus import PrometheusServer, promtool, running_prometheus
from tests.support.store_render import render_openmetrics, series_for
from tests.support.synthetic_fleet import synthetic_frames

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

STEP = 60.0
START = (time.time() // 3600) * 3600 - 4 * 3600
END = START + 60 * 60
MEMORY = "gpulens_device_memory_used_bytes"
ECC = "gpulens_gpu_ecc_errors_total"
BAD = {MEMORY: ["-1e300", "NaN", "+Inf"], ECC: ["1e19"]}


def _hostile(text: str) -> str:
    """The last samples of some series (in the hour's last minute) set to impossible values, as a broken
    exporter would have sent them; the tests of other edges collect before that minute."""
    lines = text.splitlines()
    todo = {metric: list(values) for metric, values in BAD.items()}
    for i in reversed(range(len(lines))):
        line = lines[i]
        metric = line.split("{", 1)[0]
        if todo.get(metric):
            labels, _value, ts = line.rsplit(" ", 2)
            lines[i] = f"{labels} {todo[metric].pop()} {ts}"
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """One hour of a small synthetic fleet, some values impossible, in a real Prometheus's TSDB."""
    tmp = tmp_path_factory.mktemp("prom-edges")
    truth = synthetic_frames(START, END, STEP, nodes=1, whole_gpus=1)
    source = tmp / "history.om"
    source.write_text(_hostile(render_openmetrics(series_for(truth, "gpulens"))), encoding="utf-8")
    code, output = promtool("tsdb", "create-blocks-from", "openmetrics", str(source), str(tmp / "tsdb"), timeout=120)
    assert code == 0, output
    args = ["--query.lookback-delta=30s", "--storage.tsdb.retention.time=100y"]
    with running_prometheus(data_dir=tmp / "prom", storage_path=tmp / "tsdb", extra_args=args) as prom:
        yield prom


def _device_times(store: Store) -> list[float]:
    return [r[0] for r in store.query("SELECT DISTINCT epoch(ts) FROM device_samples ORDER BY 1")]


def _gaps(store: Store) -> list[tuple[float, float]]:
    return [(a, b) for a, b in store.query("SELECT epoch(gap_start), epoch(gap_end) FROM gaps ORDER BY 1")]


def test_the_last_step_before_an_end_off_the_grid_is_collected_and_no_false_gap_recorded(
    tmp_path: Path, prometheus: PrometheusServer, promtool_binary: str, prometheus_binary: str
) -> None:
    db = tmp_path / "s.duckdb"
    end = START + 30 * STEP + 30  # half a step past the 31st step
    proc = gpulens("collect", "--prometheus", prometheus.url, "--start", f"{START:.0f}", "--end", f"{end:.0f}",
                   "--step", "60s", "--schema", "gpulens", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    with Store(str(db)) as store:
        assert _device_times(store) == [START + k * STEP for k in range(31)], "every step in [start, end)"
        assert _gaps(store) == []


def test_recollecting_a_span_replaces_its_gaps(
    tmp_path: Path, prometheus: PrometheusServer, promtool_binary: str, prometheus_binary: str
) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store, PrometheusClient(HttpSettings(prometheus.url)) as client:
        # A first collection that got no device samples (say the exporter's series were not there yet).
        collect_range(store, client, start=START + 20 * STEP, end=START + 50 * STEP, step=STEP,
                      metrics=["gpulens_gpu_info"])
        assert _gaps(store) == [(START + 20 * STEP, START + 50 * STEP)]
        # Collected again over [START, START + 40 steps) in other windows: the samples are there now.
        summary = collect_range(store, client, start=START, end=START + 40 * STEP, step=STEP, schema="gpulens",
                                max_points=25)
        assert len(summary.windows) == 2
        assert _gaps(store) == [(START + 40 * STEP, START + 50 * STEP)], "only the span not collected again"


def test_impossible_values_in_a_query_range_answer_become_null_and_the_rest_is_stored(
    tmp_path: Path, prometheus: PrometheusServer, promtool_binary: str, prometheus_binary: str
) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store, PrometheusClient(HttpSettings(prometheus.url)) as client:
        summary = collect_range(store, client, start=START, end=END, step=STEP, schema="gpulens")
        assert summary.rejected.total == 4
        assert dict(summary.rejected.counts) == {
            (MEMORY, "below its range"): 1, (MEMORY, "NaN"): 1, (MEMORY, "not finite"): 1,
            (ECC, "above its range"): 1,
        }
        assert len(_device_times(store)) == 60
        memory = store.frame("SELECT memory_used_bytes FROM device_samples")["memory_used_bytes"]
        assert memory.null_count() >= 3 and memory.min() >= 0  # type: ignore[operator]
        ecc = store.frame("SELECT ecc_corrected_total AS a, ecc_uncorrected_total AS b FROM gpu_samples")
        assert ecc.null_count().sum_horizontal().item() >= 1
        assert ecc.max().max_horizontal().item() < 9.2e18


def test_the_cli_warns_about_impossible_values_and_exits_zero(
    tmp_path: Path, prometheus: PrometheusServer, promtool_binary: str, prometheus_binary: str
) -> None:
    proc = gpulens("collect", "--prometheus", prometheus.url, "--start", f"{START:.0f}", "--end", f"{END:.0f}",
                   "--schema", "gpulens", "--db", str(tmp_path / "s.duckdb"))
    assert proc.returncode == 0, proc.stderr
    assert f"gpulens: warning: {prometheus.url}: 4 impossible value(s) set to NULL: " in proc.stderr


def test_an_end_within_the_last_minute_is_named_as_such(
    tmp_path: Path, prometheus: PrometheusServer, promtool_binary: str, prometheus_binary: str
) -> None:
    proc = gpulens("collect", "--prometheus", prometheus.url, "--start", "now-20s", "--end", "now", "--step", "1s",
                   "--db", str(tmp_path / "s.duckdb"))
    assert_one_line_error(proc, "--end now falls within the last minute, which is not final yet",
                          "give an earlier --start, or run again after")
    assert "--end must be after --start" not in proc.stderr


def test_a_url_without_a_scheme_fails_at_once_without_retries(tmp_path: Path) -> None:
    began = time.monotonic()
    proc = gpulens("collect", "--prometheus", "not-a-url", "--start", "now-1h", "--db", str(tmp_path / "s.duckdb"))
    assert time.monotonic() - began < 10.0
    assert_one_line_error(proc, "--prometheus 'not-a-url' is not an http:// or https:// URL")
