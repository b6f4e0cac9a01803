"""Scrape exporters' ``/metrics`` directly (embedded mode) and ingest each target as one window.

Targets are fetched and parsed in parallel, each within its own whole-request deadline and body cap
(:mod:`collector.bounded_get`); a target that fails (unreachable, HTTP error, redirect, too slow, too
big, malformed exposition) is reported with its URL (and line), recorded as a gap (target = URL), and
does not stop the others. A URL's credentials (``https://user:secret@host/``) are used for the request
only: every message and stored target names it redacted (``https://user:***@host/``). Values are checked per sample (:mod:`collector.validate`): an impossible
one becomes NULL and is counted on its target's result. A cycle is one window of source ``scrape``: the good
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

from collector.bounded_get import DEFAULT_MAX_BYTES, FetchError, Limits, bounded_get
from collector.bounded_get import new_client as new_bounded_client
from collector.dcgm_generation import Speaks, speaks
from collector.exposition import ExpositionError, parse_exposition
from collector.mapping import SchemaName, to_store_frames
from collector.store import Gap, Store
from collector.store_errors import StoreBusy
from collector.validate import Rejections, validate_samples
from gpulens.core.errors import UserError
from gpulens.core.redact import redact

SOURCE = "scrape"
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"


@dataclass(frozen=True)
class TargetResult:
    """One target of one scrape cycle: samples read, or the error that made it a gap."""

    url: str
    """The target's URL with its credentials redacted (as shown and stored)."""
    samples: int = 0
    error: str | None = None
    rejected: Rejections = field(default_factory=Rejections)
    """Impossible values of this target set to NULL (the target's other samples are stored)."""
    speaks: Speaks = field(default_factory=lambda: Speaks(None))
    """Which naming generation the target speaks (gpulens, a dcgm-exporter generation) and its warnings."""


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

    @property
    def failed(self) -> list[str]:
        """URLs of the targets that became gaps in this cycle."""
        return [t.url for t in self.targets if t.error]

    @property
    def warnings(self) -> list[str]:
        """One line per target whose impossible values were set to NULL, and per naming problem of a target
        (mixed dcgm-exporter generations, no known field, fields the name table does not know)."""
        rejected = [f"{t.url}: {t.rejected.describe()}" for t in self.targets if t.rejected.total]
        return rejected + [f"{t.url}: {w}" for t in self.targets for w in t.speaks.warnings]


def fetch(client: httpx.Client, url: str, limits: Limits | None = None) -> str:
    """GET ``url`` within ``limits`` and return its body; failures raise ``ScrapeError`` naming the target."""
    try:
        body = bounded_get(client, url, limits or Limits())
    except FetchError as exc:
        raise ScrapeError(str(exc)) from exc
    return body.decode("utf-8", errors="replace")


def new_client(timeout: float) -> httpx.Client:
    """An HTTP client asking for the Prometheus text format (not OpenMetrics); no redirects followed."""
    return new_bounded_client(timeout, {"Accept": ACCEPT})


class ScrapeError(Exception):
    """A target that could not be scraped; the message names it."""


def _parse_target(url: str, text: str, scrape_ms: int) -> tuple[pl.DataFrame, Rejections]:
    long = parse_exposition(text, target=url)
    return validate_samples(long.with_columns(pl.col("ts_ms").fill_null(scrape_ms)))


def _map_targets(
    good: list[tuple[str, pl.DataFrame]], schema: SchemaName
) -> tuple[dict[str, pl.DataFrame], dict[str, str]]:
    """Store frames of all good targets (mapped together); should that fail, target by target, and the
    targets that still fail are returned with their error (they become gaps, the others are stored)."""
    if not good:
        return {}, {}
    try:
        merged = pl.concat([long for _, long in good], how="diagonal_relaxed")
        return (to_store_frames(merged, schema, SOURCE) if merged.height else {}), {}
    except pl.exceptions.PolarsError:
        pass
    parts: list[dict[str, pl.DataFrame]] = []
    failed: dict[str, str] = {}
    for url, long in good:
        try:
            parts.append(to_store_frames(long, schema, SOURCE) if long.height else {})
        except pl.exceptions.PolarsError as exc:
            failed[url] = f"{url}: values that cannot be stored: {str(exc).splitlines()[0][:200]}"
    frames: dict[str, pl.DataFrame] = {}
    for part in parts:
        for table, frame in part.items():
            frames[table] = pl.concat([frames[table], frame], how="diagonal_relaxed") if table in frames else frame
    return frames, failed


@dataclass(frozen=True)
class Cycle:
    """One scrape cycle fetched, parsed and mapped, not yet written: store frames, gaps and results."""

    timestamp: float
    frames: dict[str, pl.DataFrame]
    gaps: tuple[Gap, ...]
    targets: tuple[TargetResult, ...]


def fetch_cycle(
    urls: Sequence[str],
    client: httpx.Client,
    *,
    limits: Limits,
    schema: SchemaName = "auto",
    interval: float = 15.0,
    clock: Callable[[], float] = time.time,
) -> Cycle:
    """Scrape every target once, in parallel; a failed target becomes a gap, the others store frames."""
    now = clock()
    scrape_ms = int(round(now * 1000))

    def work(url: str) -> tuple[str, pl.DataFrame | None, Rejections, str | None]:
        name = redact(url)  # the request alone sees the credentials
        try:
            long, rejected = _parse_target(name, fetch(client, url, limits), scrape_ms)
            return name, long, rejected, None
        except (ScrapeError, ExpositionError) as exc:
            return name, None, Rejections(), redact(str(exc))

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(urls)))) as pool:
        fetched = list(pool.map(work, urls))
    frames, unmappable = _map_targets([(url, long) for url, long, _, _ in fetched if long is not None], schema)
    results = []
    gaps = []
    for url, long, rejected, error in fetched:
        error = error or unmappable.get(url)
        if long is None or error:
            gaps.append(Gap(url, now, now + interval, error or "failed"))
            results.append(TargetResult(url, error=error))
        else:
            results.append(TargetResult(url, samples=long.height, rejected=rejected, speaks=speaks(long)))
    return Cycle(now, frames, tuple(gaps), tuple(results))


def write_cycle(store: Store, cycle: Cycle) -> ScrapeSummary:
    """Ingest one cycle as one committed window: every good target's samples, a gap per failed one."""
    now = cycle.timestamp
    window = store.ingest_window(SOURCE, now, now, cycle.frames, cycle.gaps, now=now)
    return ScrapeSummary(now, cycle.targets, window.total_rows)


def scrape_cycle(
    store: Store,
    urls: Sequence[str],
    *,
    timeout: float = 10.0,
    schema: SchemaName = "auto",
    interval: float = 15.0,
    clock: Callable[[], float] = time.time,
    client: httpx.Client | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> ScrapeSummary:
    """Scrape every target once (in parallel) and ingest the cycle as one committed window."""
    http = client or new_client(timeout)
    try:
        cycle = fetch_cycle(urls, http, limits=Limits(timeout, max_bytes), schema=schema, interval=interval,
                            clock=clock)
    finally:
        if client is None:
            http.close()
    return write_cycle(store, cycle)


def scrape_once(
    db_path: str,
    urls: Sequence[str],
    timeout: float = 10.0,
    *,
    schema: SchemaName = "auto",
    clock: Callable[[], float] = time.time,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> ScrapeSummary:
    """Scrape live exporters once into the store at ``db_path`` (used by ``gpulens demo``)."""
    with Store(db_path) as store:
        return scrape_cycle(store, urls, timeout=timeout, schema=schema, clock=clock, max_bytes=max_bytes)


FINAL_WAIT_SECONDS = 60.0
"""How long the last cycle of a bounded run waits for a busy store before it gives up (and says so)."""

MAX_HELD_CYCLES = 240
"""Cycles held in memory while the store is busy (an hour at 15 s); older ones are dropped, and said so."""


def _write_held(
    db_path: str,
    held: list[Cycle],
    *,
    until: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    say: Callable[[str], None],
) -> list[ScrapeSummary]:
    """Write the held cycles (oldest first); while another process holds the store, retry with backoff
    until ``until``, then keep them for the next cycle. Returns the summaries of the cycles written."""
    delay = 0.5
    while True:
        try:
            with Store(db_path) as store:
                written = [write_cycle(store, c) for c in held]
            held.clear()
            return written
        except StoreBusy:
            wait = min(delay, until - clock())
            if wait <= 0:
                say(f"store {db_path} is in use by another process: {len(held)} scrape(s) held in memory, "
                    "retrying at the next cycle")
                return []
            say(f"store {db_path} is in use by another process: retrying in {wait:.1f}s")
            sleep(wait)
            delay = min(delay * 2, 30.0)


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
    say: Callable[[str], None] = lambda s: None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    retry_busy: bool = True,
) -> list[ScrapeSummary]:
    """Scrape every ``interval`` seconds for ``duration`` seconds (forever when ``None``).

    The store is opened per cycle, so analyze and report can read it between cycles; when another
    process holds it, the cycle is kept in memory and written as soon as the store is free (retried with
    backoff until the next cycle is due, said through ``say``). ``retry_busy=False`` (``--once``) fails
    at once on a busy store instead.
    """
    summaries = []
    held: list[Cycle] = []
    start = clock()
    try:  # a bad path is one clear error before any scrape; so is a busy store unless we retry
        Store(db_path).close()
    except StoreBusy:
        if not retry_busy:
            raise
        say(f"store {db_path} is in use by another process: scraping anyway, writing when it is free")
    with new_client(timeout) as client:
        while True:
            began = clock()
            held.append(fetch_cycle(urls, client, limits=Limits(timeout, max_bytes), schema=schema,
                                    interval=interval, clock=clock))
            if len(held) > MAX_HELD_CYCLES:
                dropped = held.pop(0)
                say(f"store {db_path} busy for {MAX_HELD_CYCLES} cycles: dropped the scrape of "
                    f"{dropped.timestamp:.0f} (never written)")
            next_at = began + interval
            last = duration is not None and next_at - start >= duration
            until = next_at + FINAL_WAIT_SECONDS if last else next_at
            for summary in _write_held(db_path, held, until=until, clock=clock, sleep=sleep, say=say):
                if duration is not None:  # a run without end keeps no history in memory
                    summaries.append(summary)
                report(summary)
            if last:
                if held:
                    raise UserError(f"the store {db_path} is still in use by another process: the last "
                                    f"{len(held)} scrape(s) were not written")
                return summaries
            sleep(max(0.0, next_at - clock()))
