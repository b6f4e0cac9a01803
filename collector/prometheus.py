"""Pull samples from a Prometheus-compatible query API (Prometheus, Thanos Query, Mimir) into the store.

``query_range`` is called per metric in chunked windows (at most ``max_points`` per series per
request); each chunk is ingested as one transaction with its ``ingest_batches`` row and watermark, so
a chunk is either complete or absent. Transient failures (5xx, 429, timeouts, refused connections)
are retried with exponential backoff; after the last attempt the collection fails with one clear
message and the chunk is not marked done. Label values are escaped in PromQL. Credentials in the base
URL (``https://user:secret@host``) go to the server only: messages, window-log sources and gap targets
name it redacted (``https://user:***@host``).

With ``rollups`` the 5-minute rollup records of :mod:`collector.prometheus_rollups` are read in place
of their base metrics (the rest raw at the 5-minute step) and mapped back onto the base names, so the
same store tables are written; their windows are logged under ``prometheus-rollup:<base URL>``.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import polars as pl

from collector.dcgm_generation import TargetGenerations, speaks_by_target
from collector.mapping import (
    DCGM_METRICS,
    GPULENS_METRICS,
    KUEUE_METRICS,
    SchemaName,
    to_store_frames,
)
from collector.prometheus_rollups import (
    BY_BASE,
    ROLLUP_GROUP,
    ROLLUP_INTERVAL_SECONDS,
    ROLLUP_SOURCE,
    drop_unread_device_rows,
    query_name,
)
from collector.queue_metrics import QUEUE_SYSTEM_METRICS
from collector.store import Gap, Store, WindowResult
from collector.validate import Rejections, validate_samples
from gpulens.core.errors import UserError
from gpulens.core.redact import redact, redact_logs_of
from gpulens.core.timeparse import format_time

SOURCE = "prometheus"
RETRY_STATUS = {429, 500, 502, 503, 504}


class PrometheusError(UserError):
    """The query API failed for good (after retries) or answered something unusable."""


def escape_promql_string(value: str) -> str:
    """Escape ``value`` for a double-quoted PromQL string (label matcher value)."""
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    return out.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def series_selector(metric: str, labels: Mapping[str, str] | None = None) -> str:
    """``metric{k="v",...}`` with every label value escaped (tenant strings are data)."""
    if not labels:
        return metric
    for key in labels:
        if not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise UserError(f"invalid label name {key!r} in selector")
    inner = ",".join(f'{k}="{escape_promql_string(v)}"' for k, v in sorted(labels.items()))
    return f"{metric}{{{inner}}}"


def metrics_for(schema: SchemaName) -> tuple[str, ...]:
    """The series names the collector queries for ``schema`` (the queue metrics of Kueue, KAI Scheduler and
    Volcano with every schema)."""
    queues = KUEUE_METRICS + QUEUE_SYSTEM_METRICS
    if schema == "gpulens":
        return GPULENS_METRICS + queues
    if schema == "dcgm":
        return DCGM_METRICS + queues
    return GPULENS_METRICS + DCGM_METRICS + queues


@dataclass(frozen=True)
class HttpSettings:
    """How to reach the query API: auth, TLS, timeouts and retries."""

    url: str
    bearer_token_file: Path | None = None
    ca_file: Path | None = None
    insecure_skip_verify: bool = False
    timeout: float = 30.0
    retries: int = 4
    backoff: float = 0.5
    headers: tuple[tuple[str, str], ...] = ()
    """Extra request headers, e.g. ``X-Scope-OrgID`` for a Mimir / Cortex tenant."""


class PrometheusClient:
    """A small client of the Prometheus HTTP API (``/api/v1/query_range``) with retries."""

    def __init__(
        self,
        settings: HttpSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.base = settings.url.rstrip("/")
        self.name = redact(self.base)
        """The base URL as shown and stored: credentials redacted."""
        self._sleep = sleep
        headers = {"Accept": "application/json", **dict(settings.headers)}
        if settings.bearer_token_file is not None:
            try:
                token = settings.bearer_token_file.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise UserError(f"cannot read bearer token file {settings.bearer_token_file}: {exc.strerror}") from exc
            headers["Authorization"] = f"Bearer {token}"
        verify: bool | str = True
        if settings.insecure_skip_verify:
            verify = False
        elif settings.ca_file is not None:
            if not settings.ca_file.is_file():
                raise UserError(f"CA file {settings.ca_file} does not exist")
            verify = str(settings.ca_file)
        redact_logs_of("httpx")  # it logs each request's URL, credentials included
        self._http = httpx.Client(headers=headers, verify=verify, timeout=settings.timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, path: str, params: dict[str, str]) -> bytes:
        """The body of a successful answer; retries transient failures, raises ``PrometheusError`` otherwise."""
        url = f"{self.base}{path}"
        shown = f"{self.name}{path}"
        attempts = self.settings.retries + 1
        last = ""
        for attempt in range(attempts):
            if attempt:
                self._sleep(self.settings.backoff * 2 ** (attempt - 1))
            try:
                resp = self._http.get(url, params=params)
            except httpx.TimeoutException:
                last = f"timed out after {self.settings.timeout:g}s"
                continue
            except httpx.TransportError as exc:
                last = f"connection failed: {redact(str(exc))}"
                continue
            if resp.status_code in RETRY_STATUS:
                last = f"HTTP {resp.status_code}"
                continue
            if resp.status_code != 200:
                try:
                    payload = json.loads(resp.content)
                except ValueError:
                    payload = {}
                detail = f"{payload.get('errorType', '')} {payload.get('error', '')}".strip()
                raise PrometheusError(f"{shown}: HTTP {resp.status_code}" + (f": {redact(detail)}" if detail else ""))
            return resp.content
        raise PrometheusError(f"{shown}: failed after {attempts} attempts: {last}")

    def query_range(self, query: str, start: float, end: float, step: float, metric: str = "") -> pl.DataFrame:
        """A range query (``end`` inclusive, as Prometheus defines it) as the long sample frame."""
        body = self._get(
            "/api/v1/query_range",
            {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"},
        )
        return matrix_to_long(body, metric or query, origin=self.name)

    def metric_names(self, pattern: str, start: float, end: float) -> set[str]:
        """Names of the series matching the regular expression ``pattern`` that have samples in
        ``[start, end]``: one look-up in the series index (``/api/v1/label/__name__/values``)."""
        body = self._get(
            "/api/v1/label/__name__/values",
            {"match[]": f'{{__name__=~"{escape_promql_string(pattern)}"}}', "start": f"{start:.3f}",
             "end": f"{end:.3f}"},
        )
        try:
            answer = json.loads(body)
        except ValueError:
            raise PrometheusError(f"{self.name}: label values answered something that is not JSON") from None
        if not isinstance(answer, dict) or answer.get("status") != "success" or not isinstance(answer.get("data"), list):
            raise PrometheusError(f"{self.name}: label values did not succeed")
        return {str(name) for name in answer["data"]}


def matrix_to_long(body: bytes, metric: str, *, origin: str = "prometheus") -> pl.DataFrame:
    """Flatten a ``query_range`` answer into the long sample frame, JSON decoded by polars (no Python loop)."""
    empty = pl.DataFrame(schema={"metric": pl.Utf8, "value": pl.Float64, "ts_ms": pl.Int64})
    try:
        answer = pl.read_json(io.BytesIO(body), infer_schema_length=None)
    except (pl.exceptions.PolarsError, ValueError) as exc:
        raise PrometheusError(f"{origin}: query_range answered something that is not JSON: {exc}") from None
    if "data" not in answer.columns or answer["status"][0] != "success":
        raise PrometheusError(f"{origin}: query_range did not succeed")
    data = answer.select(pl.col("data").struct.unnest())
    if "resultType" in data.columns and data["resultType"][0] != "matrix":
        raise PrometheusError(f"{origin}: query_range answered {data['resultType'][0]!r}, not a matrix")
    if "result" not in data.columns or data.schema["result"] == pl.List(pl.Null):
        return empty
    series = data.select("result").explode("result").drop_nulls()
    if series.height == 0:
        return empty
    series = series.unnest("result").with_row_index("_series")
    label_fields = [f.name for f in series.schema["metric"].fields] if isinstance(
        series.schema["metric"], pl.Struct) else []
    labels = series.select("_series", *[pl.col("metric").struct.field(n).alias(n) for n in label_fields
                                        if n != "__name__"])
    points = series.select("_series", "values").explode("values").drop_nulls("values")
    ts = pl.col("values").list.get(0).cast(pl.Float64, strict=False) * 1000
    points = points.select(
        "_series",
        # A time no int64 of milliseconds holds is no sample time: the point is dropped, never a crash.
        ts_ms=pl.when(ts.is_finite() & (ts.abs() < 9.2e18)).then(ts.round(0)).cast(pl.Int64),
        value=pl.col("values").list.get(1).cast(pl.Float64, strict=False),
    ).drop_nulls("ts_ms")
    return points.join(labels, on="_series", how="left").drop("_series").with_columns(metric=pl.lit(metric))


@dataclass(frozen=True)
class RangeSummary:
    """What a Prometheus collection did."""

    windows: tuple[WindowResult, ...]
    skipped: int
    rejected: Rejections = field(default_factory=Rejections)
    """Impossible values set to NULL (or dropped) across the collection."""
    speaks: tuple[str, ...] = ()
    """Which naming generation each scrape target (``instance``) spoke: ``target T: speaks ...``."""
    naming_warnings: tuple[str, ...] = ()
    """Targets that mixed dcgm-exporter generations, each once."""

    @property
    def rows(self) -> int:
        return sum(w.total_rows for w in self.windows)


def last_step(start: float, end: float, step: float) -> float:
    """The last evaluation time ``start + k*step`` that is still before ``end`` (``[start, end)``)."""
    steps = math.ceil((end - start) / step - 1e-9)
    return start + max(0, steps - 1) * step


def chunk_windows(start: float, end: float, step: float, max_points: int) -> list[tuple[float, float]]:
    """Split ``[start, end)`` into step-aligned windows of at most ``max_points`` steps."""
    if step <= 0:
        raise UserError("--step must be positive")
    if end <= start:
        raise UserError("--end must be after --start")
    span = step * max_points
    out = []
    t = start
    while t < end:
        out.append((t, min(t + span, end)))
        t += span
    return out


def _missing_spans(present_ms: np.ndarray, start: float, end: float, step: float) -> list[tuple[float, float]]:
    expected = np.arange(start, end, step)
    expected_ms = np.rint(expected * 1000).astype(np.int64)
    missing = ~np.isin(expected_ms, present_ms)
    if not missing.any():
        return []
    idx = np.flatnonzero(missing)
    breaks = np.flatnonzero(np.diff(idx) > 1)
    starts = np.concatenate(([idx[0]], idx[breaks + 1]))
    stops = np.concatenate((idx[breaks], [idx[-1]]))
    return [(float(expected[a]), float(min(expected[b] + step, end))) for a, b in zip(starts, stops, strict=True)]


def source_of(client: PrometheusClient, *, rollups: bool = False) -> str:
    """The window-log source of a collection: raw and rollup collections keep separate logs and watermarks."""
    return f"{ROLLUP_SOURCE if rollups else SOURCE}:{client.name}"


def require_rollups(client: PrometheusClient, names: Sequence[str], start: float, end: float) -> None:
    """Fail before any range query when none of the rollup records of ``names`` has a sample in the span
    (the recording rules are not deployed there), naming the records looked for."""
    records = sorted({query_name(n) for n in names if n in BY_BASE})
    if not records:
        raise UserError("--rollups: none of the collected metrics has a rollup record (deploy/prometheus)")
    found = client.metric_names("|".join(records), start, end)
    if not found & set(records):
        raise PrometheusError(
            f"--rollups: {client.name} has none of the rollup series between {format_time(start)} and {format_time(end)} "
            f"({', '.join(records)}): load group {ROLLUP_GROUP} of deploy/prometheus/gpulens-rules.yaml into "
            "its Prometheus, Thanos Ruler or Mimir ruler (deploy/base/prometheusrule.yaml with the Prometheus "
            "Operator), or collect without --rollups"
        )


def collect_range(
    store: Store,
    client: PrometheusClient,
    *,
    start: float,
    end: float,
    step: float,
    schema: SchemaName = "auto",
    labels: Mapping[str, str] | None = None,
    max_points: int = 1440,
    parallel: int = 4,
    progress: Callable[[WindowResult], None] = lambda w: None,
    metrics: Sequence[str] | None = None,
    rollups: bool = False,
) -> RangeSummary:
    """Collect ``[start, end)`` at ``step`` chunk by chunk; chunks already stored without gaps are skipped.

    Every step ``start + k*step`` before ``end`` is queried, the last one too when ``end`` is not on
    the step grid. A chunk's gaps replace the gaps stored earlier for its span (a later collection that
    found the samples removes the gap an earlier one recorded). Impossible values become NULL
    (:mod:`collector.validate`), counted in ``RangeSummary.rejected``.

    With ``rollups`` (``step`` must be the rollup interval), a base metric with a rollup record is read
    from the record, queried one interval later and stored at the start of the span the record covers;
    the others are read raw at the step.
    """
    names = tuple(metrics) if metrics is not None else metrics_for(schema)
    if rollups:
        if abs(step - ROLLUP_INTERVAL_SECONDS) > 1e-9:
            raise UserError(f"--rollups reads the 5-minute rollups of deploy/prometheus: use --step 5m "
                            f"(got {step:g}s), or collect without --rollups")
        chunk_windows(start, end, step, max_points)  # the same checks of the span before any request
        require_rollups(client, names, start, end + step)
    source = source_of(client, rollups=rollups)
    done: list[WindowResult] = []
    skipped = 0
    rejected = Rejections()
    generations = TargetGenerations.empty()
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        for w_start, w_end in chunk_windows(start, end, step, max_points):
            if store.window_complete(source, w_start, w_end):
                skipped += 1
                continue

            def fetch(name: str, a: float = w_start, b: float = last_step(w_start, w_end, step)) -> pl.DataFrame:
                if not (rollups and name in BY_BASE):
                    return client.query_range(series_selector(name, labels), a, b, step, metric=name)
                # The last record of (T, T + interval] covers the interval before it: it is stored at T. A
                # ruler evaluates at its own offset, so that span starts up to one interval before T;
                # last_over_time finds the record whatever the server's lookback delta.
                shift = ROLLUP_INTERVAL_SECONDS
                query = f"last_over_time({series_selector(query_name(name), labels)}[{shift:g}s])"
                got = client.query_range(query, a + shift, b + shift, step, metric=name)
                return got.with_columns(pl.col("ts_ms") - round(shift * 1000))

            parts = [p for p in pool.map(fetch, names) if p.height]
            long, bad = validate_samples(pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame())
            rejected = rejected + bad
            generations.add(speaks_by_target(long))
            frames = to_store_frames(long, schema, ROLLUP_SOURCE if rollups else SOURCE) if long.height else {}
            if rollups and "device_samples" in frames:
                frames["device_samples"] = drop_unread_device_rows(frames["device_samples"])
                if frames["device_samples"].height == 0:
                    del frames["device_samples"]
            present = (
                np.unique(frames["device_samples"]["ts"].dt.epoch("ms").to_numpy())
                if "device_samples" in frames
                else np.array([], dtype=np.int64)
            )
            gaps = [
                Gap(client.name, a, b, "no device samples from the query API")
                for a, b in _missing_spans(present, w_start, w_end, step)
            ]
            result = store.ingest_window(source, w_start, w_end, frames, gaps, replace_gaps=True)
            done.append(result)
            progress(result)
    return RangeSummary(tuple(done), skipped, rejected, tuple(generations.lines()), tuple(generations.warnings))
