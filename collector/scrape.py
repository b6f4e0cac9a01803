"""Scrape exporters' ``/metrics`` directly (embedded mode) and ingest each target as one window.

Targets are fetched and parsed in parallel, each with its own timeout; a target that fails
(unreachable, HTTP error, malformed exposition) is reported with its URL (and line), recorded as a gap
(target = URL), and does not stop the others. A cycle is one window of source ``scrape``: the good
targets' samples are mapped and written together in one transaction (fixed costs paid once per cycle,
not per target). Samples without their own timestamp get the scrape time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import polars as pl

from gpulens.collector.exposition import ExpositionError, parse_exposition
from gpulens.collector.mapping import SchemaName, to_store_frames
from gpulens.collector.store import Gap, Store

SOURCE = "scrape"
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"


@dataclass(frozen=True)
class TargetResult:
    """One target of one scrape cycle: samples read, or the error that made it a gap."""

    url: str
    samples: int = 0
    error: str | None = None


@dataclass(frozen=True)
class ScrapeSummary:
    """What one scrape cycle did, per target."""

    timestamp: float
    targets: tuple[TargetResult, ...] = field(default_factory=tuple)
    rows: int = 0
    """New store rows written by the cycle (all targets, one transaction)."""

    @property
    def errors(self) -> list[str]:
        return [t.error for t in self.targets if t.error]

    @property
    def samples(self) -> int:
        return sum(t.samples for t in self.targets)


def fetch(client: httpx.Client, url: str) -> str:
    """GET ``url`` and return its body; failures raise ``ScrapeError`` naming the target."""
    try:
        resp = client.get(url)
    except httpx.TimeoutException as exc:
        raise ScrapeError(f"{url}: timed out ({exc.__class__.__name__})") from exc
    except httpx.HTTPError as exc:
        raise ScrapeError(f"{url}: {exc}") from exc
    if resp.status_code != 200:
        raise ScrapeError(f"{url}: HTTP {resp.status_code}")
    return resp.text


def new_client(timeout: float) -> httpx.Client:
    """An HTTP client asking for the Prometheus text format (not OpenMetrics)."""
    return httpx.Client(timeout=timeout, follow_redirects=True, headers={"Accept": ACCEPT})


class ScrapeError(Exception):
    """A target that could not be scraped; the message names it."""


def _parse_target(url: str, text: str, scrape_ms: int) -> pl.DataFrame:
    long = parse_exposition(text, target=url)
    return long.with_columns(pl.col("ts_ms").fill_null(scrape_ms))


def scrape_cycle(
    store: Store,
    urls: Sequence[str],
    *,
    timeout: float = 10.0,
    schema: SchemaName = "auto",
    interval: float = 15.0,
    clock: Callable[[], float] = time.time,
    client: httpx.Client | None = None,
) -> ScrapeSummary:
    """Scrape every target once (in parallel) and ingest the cycle as one committed window."""
    now = clock()
    scrape_ms = int(round(now * 1000))
    own_client = client is None
    http = client or new_client(timeout)

    def work(url: str) -> tuple[str, pl.DataFrame | None, str | None]:
        try:
            return url, _parse_target(url, fetch(http, url), scrape_ms), None
        except (ScrapeError, ExpositionError) as exc:
            return url, None, str(exc)

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(urls)))) as pool:
            fetched = list(pool.map(work, urls))
    finally:
        if own_client:
            http.close()
    # One transaction per cycle: every good target's samples, a gap per failed target, one batch row.
    results = []
    good = []
    gaps = []
    for url, long, error in fetched:
        if long is None:
            gaps.append(Gap(url, now, now + interval, error or "failed"))
            results.append(TargetResult(url, error=error))
        else:
            good.append(long)
            results.append(TargetResult(url, samples=long.height))
    merged = pl.concat(good, how="diagonal_relaxed") if good else pl.DataFrame()
    frames = to_store_frames(merged, schema, SOURCE) if merged.height else {}
    window = store.ingest_window(SOURCE, now, now, frames, gaps, now=now)
    return ScrapeSummary(now, tuple(results), window.total_rows)


def scrape_once(
    db_path: str,
    urls: Sequence[str],
    timeout: float = 10.0,
    *,
    schema: SchemaName = "auto",
    clock: Callable[[], float] = time.time,
) -> ScrapeSummary:
    """Scrape live exporters once into the store at ``db_path`` (used by ``gpulens demo``)."""
    with Store(db_path) as store:
        return scrape_cycle(store, urls, timeout=timeout, schema=schema, clock=clock)


def scrape_loop(
    db_path: str,
    urls: Sequence[str],
    *,
    interval: float,
    duration: float | None,
    timeout: float = 10.0,
    schema: SchemaName = "auto",
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    report: Callable[[ScrapeSummary], None] = lambda s: None,
) -> list[ScrapeSummary]:
    """Scrape every ``interval`` seconds for ``duration`` seconds (forever when ``None``)."""
    summaries = []
    start = clock()
    with Store(db_path) as store, new_client(timeout) as client:
        while True:
            began = clock()
            summary = scrape_cycle(
                store, urls, timeout=timeout, schema=schema, interval=interval, clock=clock, client=client
            )
            if duration is not None:  # a run without end keeps no history in memory
                summaries.append(summary)
            report(summary)
            next_at = began + interval
            if duration is not None and next_at - start >= duration:
                return summaries
            sleep(max(0.0, next_at - clock()))
