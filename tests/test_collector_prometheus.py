"""The Prometheus query-API source against a local HTTP stand-in: chunks, retries, failures, escaping."""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from collector.exposition import parse_exposition
from collector.prometheus import (
    HttpSettings,
    PrometheusClient,
    PrometheusError,
    collect_range,
    escape_promql_string,
    series_selector,
)
from collector.store import Store
from tests.support.http_stub import http_stand_in
from tests.support.store_render import render_text, series_for
from tests.support.synthetic_fleet import HOSTILE, synthetic_frames

T0 = 1_790_000_000.0
STEP = 60.0


class FakePrometheus:
    """Serves ``/api/v1/query_range`` from known series, and can fail or hang on purpose."""

    def __init__(self, frames: dict[str, pl.DataFrame], naming: str = "gpulens", extra_text: str = "") -> None:
        text = render_text(series_for(frames, naming), timestamps=True) + extra_text  # type: ignore[arg-type]
        long = parse_exposition(text)
        label_cols = [c for c in long.columns if c not in ("line", "metric", "value", "ts_ms")]
        self.series: dict[str, list[dict[str, Any]]] = {}
        for key, group in long.group_by(["metric", *label_cols], maintain_order=True):
            labels = {c: v for c, v in zip(label_cols, key[1:], strict=True) if v not in (None, "")}
            self.series.setdefault(str(key[0]), []).append(
                {"metric": {"__name__": key[0], **labels},
                 "points": list(zip(group["ts_ms"].to_list(), group["value"].to_list(), strict=True))}
            )
        self.requests: list[dict[str, str]] = []
        self.headers: list[dict[str, str]] = []
        self.fail_status: int | None = None
        self.fail_times = 0
        self.fail_from: float | None = None  # fail every request whose start >= this
        self.hang_seconds = 0.0

    def respond(self, handler: BaseHTTPRequestHandler) -> tuple[int, str, bytes]:
        url = urllib.parse.urlparse(handler.path)
        params = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        self.requests.append(params)
        self.headers.append(dict(handler.headers.items()))
        if self.hang_seconds:
            time.sleep(self.hang_seconds)
        start, end = float(params["start"]), float(params["end"])
        if self.fail_status and (self.fail_times > 0 or (self.fail_from is not None and start >= self.fail_from)):
            self.fail_times -= 1
            return self.fail_status, "text/plain", b"upstream unavailable"
        metric = re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*", params["query"])
        result = []
        for s in self.series.get(metric.group(0) if metric else "", []):
            values = [[ms / 1000, repr(v)] for ms, v in s["points"] if start * 1000 <= ms <= end * 1000]
            if values:
                result.append({"metric": s["metric"], "values": values})
        body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        return 200, "application/json", json.dumps(body).encode()


@contextmanager
def fake_prometheus(fake: FakePrometheus) -> Iterator[str]:
    with http_stand_in(fake.respond) as url:
        yield url


def _client(url: str, sleeps: list[float] | None = None, **kw: Any) -> PrometheusClient:
    sink = sleeps if sleeps is not None else []
    return PrometheusClient(HttpSettings(url, **kw), sleep=sink.append)


def _truth(minutes: int = 30, **kw: Any) -> dict[str, pl.DataFrame]:
    return synthetic_frames(T0, T0 + minutes * 60, STEP, **kw)


def _table(store: Store, sql: str) -> list[tuple[Any, ...]]:
    return store.query(sql)


def test_a_range_is_collected_chunk_by_chunk_and_equals_the_truth(tmp_path: Path) -> None:
    truth = _truth()
    fake = FakePrometheus(truth)
    with fake_prometheus(fake) as url, Store(str(tmp_path / "s.duckdb")) as store, _client(url) as client:
        summary = collect_range(store, client, start=T0, end=T0 + 1800, step=STEP, schema="gpulens",
                                max_points=10)
        assert len(summary.windows) == 3
        got = store.frame(
            "SELECT ts, node, gpu_uuid, device_id, activity_ratio, memory_used_bytes, memory_total_bytes "
            "FROM device_samples ORDER BY device_id, ts")
        want = truth["device_samples"].drop("source").sort("device_id", "ts")
        assert got.equals(want)
        assert store.count("allocations") == truth["allocations"].height
        assert store.count("gaps") == 0
        assert store.watermark(f"prometheus:{url}") == T0 + 1800
        again = collect_range(store, client, start=T0, end=T0 + 1800, step=STEP, schema="gpulens", max_points=10)
        assert again.skipped == 3 and not again.windows
    # Each chunk asks for at most max_points steps, end inclusive, per metric.
    first = fake.requests[0]
    assert (float(first["start"]), float(first["end"]), first["step"]) == (T0, T0 + 540, "60")


def test_a_5xx_is_retried_with_backoff_then_succeeds(tmp_path: Path) -> None:
    fake = FakePrometheus(_truth(5))
    fake.fail_status, fake.fail_times = 503, 2
    sleeps: list[float] = []
    with fake_prometheus(fake) as url, Store(str(tmp_path / "s.duckdb")) as store, \
            _client(url, sleeps, backoff=0.5) as client:
        collect_range(store, client, start=T0, end=T0 + 300, step=STEP, schema="gpulens", parallel=1)
        assert store.count("device_samples") == 40
    assert sleeps[:2] == [0.5, 1.0]


def test_persistent_5xx_fails_clearly_and_marks_no_partial_window(tmp_path: Path) -> None:
    truth = _truth(20)
    fake = FakePrometheus(truth)
    fake.fail_status, fake.fail_from = 503, T0 + 600
    db = str(tmp_path / "s.duckdb")
    with fake_prometheus(fake) as url:
        with Store(db) as store, _client(url, retries=2) as client:
            with pytest.raises(PrometheusError, match=r"failed after 3 attempts: HTTP 503"):
                collect_range(store, client, start=T0, end=T0 + 1200, step=STEP, schema="gpulens", max_points=10)
            assert _table(store, "SELECT epoch(window_start), epoch(window_end) FROM ingest_batches") == [
                (T0, T0 + 600)]
            assert store.watermark(f"prometheus:{url}") == T0 + 600
            assert _table(store, "SELECT max(epoch(ts)) FROM device_samples") == [(T0 + 540,)]
        fake.fail_from = None  # healed: the rerun fills exactly the missing window
        with Store(db) as store, _client(url) as client:
            rerun = collect_range(store, client, start=T0, end=T0 + 1200, step=STEP, schema="gpulens",
                                  max_points=10)
            assert (rerun.skipped, len(rerun.windows)) == (1, 1)
            assert store.count("device_samples") == truth["device_samples"].height


def test_a_timeout_is_retried_then_reported_clearly(tmp_path: Path) -> None:
    fake = FakePrometheus(_truth(5))
    fake.hang_seconds = 1.5
    with fake_prometheus(fake) as url, Store(str(tmp_path / "s.duckdb")) as store, \
            _client(url, timeout=0.3, retries=1) as client:
        with pytest.raises(PrometheusError, match=r"failed after 2 attempts: timed out after 0.3s"):
            collect_range(store, client, start=T0, end=T0 + 300, step=STEP, schema="gpulens", parallel=1,
                          metrics=["gpulens_device_activity_ratio"])
        assert store.count("ingest_batches") == 0


def test_a_bad_query_is_not_retried(tmp_path: Path) -> None:
    def bad(_h: BaseHTTPRequestHandler) -> tuple[int, str, bytes]:
        body = {"status": "error", "errorType": "bad_data", "error": "parse error"}
        return 400, "application/json", json.dumps(body).encode()

    sleeps: list[float] = []
    with http_stand_in(bad) as url, _client(url, sleeps) as client:
        with pytest.raises(PrometheusError, match="HTTP 400: bad_data parse error"):
            client.query_range("up", T0, T0 + 60, STEP)
    assert sleeps == []


def test_missing_samples_become_gaps_not_values(tmp_path: Path) -> None:
    truth = _truth(10)
    hole = (pl.col("ts") >= pl.from_epoch(pl.lit(int(T0 + 240)), time_unit="s")) & (
        pl.col("ts") < pl.from_epoch(pl.lit(int(T0 + 360)), time_unit="s"))
    holed = {k: v.filter(~hole) if "ts" in v.columns else v for k, v in truth.items()}
    with fake_prometheus(FakePrometheus(holed)) as url, Store(str(tmp_path / "s.duckdb")) as store, \
            _client(url) as client:
        collect_range(store, client, start=T0, end=T0 + 600, step=STEP, schema="gpulens")
        assert _table(store, "SELECT epoch(gap_start), epoch(gap_end), target FROM gaps") == [
            (T0 + 240, T0 + 360, url)]
        assert _table(store, "SELECT count(*) FROM device_samples WHERE epoch(ts) IN (?, ?)".replace(
            "?, ?", f"{T0 + 240}, {T0 + 300}")) == [(0,)]


def test_collecting_the_same_window_again_fills_its_gaps_and_removes_them(tmp_path: Path) -> None:
    truth = _truth(10)
    hole = (pl.col("ts") >= pl.from_epoch(pl.lit(int(T0 + 240)), time_unit="s")) & (
        pl.col("ts") < pl.from_epoch(pl.lit(int(T0 + 360)), time_unit="s"))
    holed = {k: v.filter(~hole) if "ts" in v.columns else v for k, v in truth.items()}
    fake = FakePrometheus(holed)
    with fake_prometheus(fake) as url, Store(str(tmp_path / "s.duckdb")) as store, _client(url) as client:
        collect_range(store, client, start=T0, end=T0 + 600, step=STEP, schema="gpulens")
        assert _table(store, "SELECT count(*) FROM gaps") == [(1,)]
        first = _table(store, "SELECT count(*) FROM device_samples")[0][0]
        fake.series = FakePrometheus(truth).series  # the samples arrived later (a remote-write backlog)
        refill = collect_range(store, client, start=T0, end=T0 + 600, step=STEP, schema="gpulens")
        assert refill.skipped == 0
        assert _table(store, "SELECT count(*) FROM gaps") == [(0,)]
        assert _table(store, "SELECT count(*) FROM device_samples")[0][0] > first
        assert collect_range(store, client, start=T0, end=T0 + 600, step=STEP, schema="gpulens").skipped >= 1


def test_label_values_are_escaped_in_promql_and_token_and_headers_are_sent(tmp_path: Path) -> None:
    assert escape_promql_string('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    selector = series_selector("gpulens_allocation_gpu_equivalents", {"tenant": HOSTILE, "node": "n1"})
    assert selector == (
        'gpulens_allocation_gpu_equivalents{node="n1",tenant="team \\"q\\" \\\\ back\'; DROP TABLE '
        'device_samples; --\\nnext a=b,{c}\\",x=\\""}'
    )
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    fake = FakePrometheus(_truth(2))
    with fake_prometheus(fake) as url, Store(str(tmp_path / "s.duckdb")) as store, \
            _client(url, bearer_token_file=token, headers=(("X-Scope-OrgID", "tenant-1"),)) as client:
        collect_range(store, client, start=T0, end=T0 + 120, step=STEP, schema="gpulens",
                      labels={"tenant": HOSTILE}, metrics=["gpulens_allocation_gpu_equivalents"])
    assert fake.requests[0]["query"].endswith(
        'tenant="team \\"q\\" \\\\ back\'; DROP TABLE device_samples; --\\nnext a=b,{c}\\",x=\\""}')
    assert fake.headers[0]["Authorization"] == "Bearer s3cret"
    assert fake.headers[0]["X-Scope-OrgID"] == "tenant-1"  # Mimir / Cortex tenant


def test_kueue_quotas_usage_and_pending_come_from_kueue_metrics(tmp_path: Path) -> None:
    lines = []
    for i in range(3):
        ms = int((T0 + i * 60) * 1000)
        cq = 'cohort="ai-factory",cluster_queue="team-a",flavor="h200-mig"'
        lines += [
            f'kueue_cluster_queue_nominal_quota{{{cq},resource="nvidia.com/mig-1g.18gb"}} 14 {ms}',
            f'kueue_cluster_queue_borrowing_limit{{{cq},resource="nvidia.com/mig-1g.18gb"}} +Inf {ms}',
            f'kueue_cluster_queue_lending_limit{{{cq},resource="nvidia.com/mig-1g.18gb"}} 7 {ms}',
            f'kueue_cluster_queue_resource_usage{{{cq},resource="nvidia.com/mig-1g.18gb"}} {10 + i} {ms}',
            f'kueue_cluster_queue_resource_pending{{cluster_queue="team-a",resource="nvidia.com/mig-1g.18gb"}} '
            f'{2 * i} {ms}',
            f'kueue_pending_workloads{{cluster_queue="team-a",status="active"}} {i} {ms}',
            f'kueue_pending_workloads{{cluster_queue="team-a",status="inadmissible"}} 1 {ms}',
        ]
    fake = FakePrometheus(_truth(3), extra_text="\n".join(lines) + "\n")
    with fake_prometheus(fake) as url, Store(str(tmp_path / "s.duckdb")) as store, _client(url) as client:
        collect_range(store, client, start=T0, end=T0 + 180, step=STEP, schema="gpulens")
        quotas = store.query("SELECT epoch(ts), object_name, flavor, resource, nominal_quota, borrowing_limit, "
                             "lending_limit, usage, annotations->>'cohort' FROM quota_snapshots ORDER BY ts")
        assert quotas == [(T0 + i * 60, "team-a", "h200-mig", "nvidia.com/mig-1g.18gb", 14.0, None, 7.0,
                           10.0 + i, "ai-factory") for i in range(3)]
        pending = store.query("SELECT epoch(ts), tenant, profile, quantity, workloads FROM pending_demand ORDER BY ts")
        # at T0 the gauge says 0 but one workload waits: kept as a count without a measured quantity
        assert pending == [(T0, "team-a", "", None, 1), (T0 + 60, "team-a", "1g.18gb", 2.0, 2),
                           (T0 + 120, "team-a", "1g.18gb", 4.0, 3)]


def test_kueue_pending_parts_of_a_gpu_are_not_whole_gpu_shapes(tmp_path: Path) -> None:
    """Kueue's gauge of HAMi cores or milli-GPUs adds up percentages and thousandths: no count of GPUs."""
    ms = int(T0 * 1000)
    lines = [f'kueue_cluster_queue_resource_pending{{cluster_queue="share",resource="{r}"}} {v} {ms}'
             for r, v in (("nvidia.com/gpucores", 90), ("alibabacloud.com/gpu-milli", 1280), ("nvidia.com/gpu", 2))]
    lines.append(f'kueue_pending_workloads{{cluster_queue="share",status="active"}} 3 {ms}')
    fake = FakePrometheus(_truth(1), extra_text="\n".join(lines) + "\n")
    with fake_prometheus(fake) as url, Store(str(tmp_path / "s.duckdb")) as store, _client(url) as client:
        collect_range(store, client, start=T0, end=T0 + 60, step=STEP, schema="gpulens")
        pending = store.query("SELECT resource, profile, quantity FROM pending_demand ORDER BY resource")
    assert pending == [("alibabacloud.com/gpu-milli", "fraction", 1280.0), ("nvidia.com/gpu", "gpu", 2.0),
                       ("nvidia.com/gpucores", "fraction", 90.0)]
