"""`gpulens collect` and `gpulens export-parquet`: fill the DuckDB store, export it to Parquet."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from collector.store_errors import storage_failures
from gpulens.cli.flag_errors import days as days_flag
from gpulens.core.errors import UserError
from gpulens.core.redact import redact
from gpulens.core.timeparse import format_time

COLLECT_HELP = (
    "Fill the DuckDB store (--db) from exactly one source; every window is written in one transaction, "
    "the same window twice adds nothing, and an interrupted run resumes where it stopped.\n\n"
    "--scrape URL [URL...]: scrape exporters' /metrics directly, in parallel, every --interval for "
    "--duration (or --once). A failing or malformed target is reported (URL and line) and recorded as a "
    "gap; the others are still ingested.\n\n"
    "--prometheus URL --start T --end T --step S: pull from a Prometheus-compatible query API "
    "(Prometheus, Thanos, Mimir: give its Prometheus API base, e.g. http://mimir/prometheus, and "
    "--header X-Scope-OrgID=TENANT) with query_range in chunks, retrying 5xx and timeouts with backoff. "
    "--start defaults to the source's watermark; --end stops at least a minute before now (a written "
    "window is final). --schema picks gpulens's metric names, dcgm-exporter's "
    "(DCGM_FI_*) or both (auto).\n\n"
    "--prometheus URL --rollups --step 5m: read the 5-minute rollups that the recording rules in deploy/ "
    "(group gpulens.rollup.rules, run by Prometheus, Thanos Ruler or Mimir's ruler) record per device and "
    "GPU, instead of the raw series; metrics without a rollup (counters, allocations) are read raw at the "
    "5-minute step. Five times fewer rows, and the analysis then decides idle per 5-minute rollup point "
    "(its mean activity), not per raw sample. The windows are logged apart from raw ones, and the last "
    "6 minutes are not collected (the ruler's last evaluation must be in).\n\n"
    "--kubernetes: snapshot namespaces, GPU pods, GPU nodes, Kueue queues, ResourceQuotas and "
    "NetworkPolicies (in-cluster config, else --kubeconfig / ~/.kube/config); tenants follow "
    "--tenancy-config, the exporter's rules, so a pod has the same tenant in both.\n\n"
    "--simulate: backfill --days of simulated history at --step (default 60s) in virtual time.\n\n"
    "Times: Unix seconds, RFC 3339 (2026-11-28T00:00:00Z), now or now-6h. Durations: 90s, 5m, 1.5h, 1h30m, 14d, 2w.\n\n"
    "Example: gpulens collect --prometheus http://prometheus:9090 --start now-1d --end now --step 60s "
    "--db gpulens.duckdb"
)


SETTLE_SECONDS = 60.0
"""``--prometheus`` never collects the last minute: a window is final once written."""

FIRST_COLLECTION_SECONDS = 86400.0
"""``--prometheus`` without ``--start`` and without an earlier collection from that server: how far back it starts."""


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _pairs(pairs: list[str], option: str) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UserError(f"invalid {option} {pair!r}: use NAME=VALUE")
        out[key.strip()] = value
    return out


def _run_scrape(urls: list[str], db: Path, interval: str, duration: str | None, once: bool, timeout: str,
                schema: str, max_body_size: str) -> None:
    from collector.scrape import ScrapeSummary, scrape_loop
    from collector.sizeparse import parse_size
    from gpulens.core.timeparse import parse_duration

    if not urls:
        raise UserError("--scrape needs at least one URL")
    for url in urls:
        _require_http_url(url, "--scrape")
    every = parse_duration(interval, what="--interval")
    limit = 0.0 if once else (parse_duration(duration, what="--duration") if duration else None)
    max_bytes = parse_size(max_body_size, what="--max-body-size")
    seconds = parse_duration(timeout, what="--timeout")
    failures: dict[str, list[str]] = {}
    cycles = [0]
    told: dict[str, str] = {}

    def report(summary: ScrapeSummary) -> None:
        cycles[0] += 1
        for target in summary.targets:  # said once per target, and again when it changes (an upgrade)
            generation = target.speaks.generation
            if generation is not None and told.get(target.url) != generation:
                told[target.url] = generation
                _say(f"target {target.url}: speaks {generation}")
        for err in summary.errors:
            _say(f"gpulens: warning: {err}")
        for line in summary.warnings:
            _say(f"gpulens: warning: {line}")
        for target in summary.targets:
            if target.error:
                failures.setdefault(target.url, []).append(target.error)
        ok = sum(1 for t in summary.targets if t.error is None)
        failed = f" (failed: {', '.join(summary.failed)})" if summary.failed else ""
        _say(f"scrape {format_time(summary.timestamp)}: {ok}/{len(summary.targets)} targets, "
             f"{summary.samples} samples, {summary.rows} new rows{failed}")

    scrape_loop(str(db), urls, interval=every, duration=limit, timeout=seconds, max_bytes=max_bytes,
                schema=schema,  # type: ignore[arg-type]
                report=report, say=lambda line: _say(f"gpulens: warning: {line}"), retry_busy=not once)
    if failures:
        first_url, errors = next(iter(failures.items()))
        if once:
            raise UserError(f"{len(failures)} of {len(urls)} targets failed (others ingested): {errors[0]}")
        which = ", ".join(f"{url} ({len(errs)} of {cycles[0]} scrapes)" for url, errs in failures.items())
        raise UserError(f"{len(failures)} of {len(urls)} targets failed (others ingested): {which}; "
                        f"first error: {errors[0]}")


def _require_http_url(url: str, flag: str) -> None:
    """An http(s) URL with a host, or one clear error at once (no retries on a typo)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(f"{flag} {redact(url)!r} is not an http:// or https:// URL (e.g. http://prometheus:9090)")


def _run_prometheus(url: str, db: Path, start: str | None, end: str, step: str, schema: str,
                    token: Path | None, ca: Path | None, insecure: bool, labels: list[str], timeout: str,
                    retries: int, headers: list[str], rollups: bool = False) -> None:
    from collector.prometheus import HttpSettings, PrometheusClient, collect_range, source_of
    from collector.prometheus_rollups import ROLLUP_INTERVAL_SECONDS
    from collector.store import Store, WindowResult
    from gpulens.core.timeparse import parse_duration, parse_time

    _require_http_url(url, "--prometheus")
    step_s = parse_duration(step, what="--step")
    if rollups and step_s != ROLLUP_INTERVAL_SECONDS:
        raise UserError(f"--rollups reads the 5-minute rollups recorded by deploy/prometheus: use --step 5m "
                        f"(got --step {step}), or collect the raw series without --rollups")
    # A window is final once written: stop a minute short of now, so Prometheus has ingested it (with
    # --rollups also one rollup interval, so the ruler has recorded the span's last rollup).
    settled = time.time() - SETTLE_SECONDS - (ROLLUP_INTERVAL_SECONDS if rollups else 0.0)
    asked_end = parse_time(end, what="--end")
    end_s = min(asked_end, settled)
    settings = HttpSettings(url, token, ca, insecure, parse_duration(timeout, what="--timeout"), retries,
                            headers=tuple(_pairs(headers, "--header").items()))

    def progress(w: WindowResult) -> None:
        _say(f"window {format_time(w.start)} .. {format_time(w.end)}: {w.total_rows} new rows, {w.gaps} gaps")

    with Store(str(db)) as store, PrometheusClient(settings) as client:
        if start is None:
            mark = store.watermark(source_of(client, rollups=rollups))
            if mark is None:  # nothing collected from there yet (a CronJob's first run): the last day
                start_s = end_s - FIRST_COLLECTION_SECONDS
                what = "rollups" if rollups else "raw series"
                _say(f"first collection of {what} from {client.name}: from {format_time(start_s)} (a day back; give --start to "
                     f"collect earlier history)")
            else:
                start_s = mark
        else:
            start_s = parse_time(start, what="--start")
        start_s = (start_s // step_s) * step_s
        if end_s <= start_s and asked_end > settled:
            ready = format_time(start_s + (time.time() - settled) + 1)
            lag = "now-6m" if rollups else "now-1m"
            raise UserError(f"--end {end} falls within the last {'6 minutes' if rollups else 'minute'}, which is "
                            f"not final yet: the collection stops at {lag} ({format_time(settled)}), not after --start "
                            f"{format_time(start_s)}; give an "
                            f"earlier --start, or run again after {ready}")
        summary = collect_range(store, client, start=start_s, end=end_s, step=step_s,
                                schema=schema, labels=_pairs(labels, "--label"),  # type: ignore[arg-type]
                                progress=progress, rollups=rollups)
    if summary.rejected.total:
        _say(f"gpulens: warning: {redact(url)}: {summary.rejected.describe()}")
    for line in summary.speaks:
        _say(line)
    for line in summary.naming_warnings:
        _say(f"gpulens: warning: {line}")
    _say(f"prometheus{' rollups' if rollups else ''}: {len(summary.windows)} windows written ({summary.rows} new rows), "
         f"{summary.skipped} already stored")


def _run_kubernetes(db: Path, kubeconfig: Path | None, tenancy_config: Path | None, timeout: str) -> None:
    from collector.inventory import collect_inventory
    from collector.store import Store
    from gpulens.core.kube_api import KubernetesClient, connection_from_kubeconfig
    from gpulens.core.tenancy.rules import load_tenancy_config
    from gpulens.core.timeparse import parse_duration

    config = load_tenancy_config(tenancy_config)
    timeout_s = parse_duration(timeout, what="--timeout")
    connection = connection_from_kubeconfig(kubeconfig)
    with Store(str(db)) as store, KubernetesClient(connection, timeout_s=timeout_s) as api:
        result = collect_inventory(store, api, config=config, say=_say)
    parts = ", ".join(f"{t} +{n}" for t, n in sorted(result.rows.items()))
    _say(f"kubernetes inventory at {format_time(result.start)}: {parts or 'no new rows'}")


def _run_simulate(db: Path, scenario: Path | None, days: float, step: str, end: str | None) -> None:
    from collector.backfill import ChunkProgress, backfill_simulated
    from gpulens.core.timeparse import parse_duration, parse_time

    step_s = parse_duration(step, what="--step")
    end_s = parse_time(end, what="--end") if end else time.time()
    end_s = (end_s // step_s) * step_s

    def progress(p: ChunkProgress) -> None:
        state = "already stored" if p.skipped else f"{p.rows} new rows in {p.seconds:.1f}s"
        _say(f"sim chunk {p.index}/{p.total} {format_time(p.start)} .. {format_time(p.end)}: {state}")

    summary = backfill_simulated(db, scenario, end_s - days * 86400.0, end_s, step_s, progress)
    _say(f"simulated backfill: {summary.chunks} chunks ({summary.skipped} already stored), "
         f"{summary.total_rows} new rows in {summary.seconds:.1f}s")


def register(app: typer.Typer) -> None:
    """Add the `collect` and `export-parquet` commands to `app`."""

    @app.command("collect", help=COLLECT_HELP)
    def collect(
        urls: Annotated[list[str] | None, typer.Argument(help="Exporter /metrics URLs (with --scrape).")] = None,
        db: Annotated[Path, typer.Option(help="DuckDB store file.")] = Path("gpulens.duckdb"),
        scrape: Annotated[bool, typer.Option("--scrape", help="Scrape the URLs given as arguments.")] = False,
        interval: Annotated[str, typer.Option(help="--scrape: time between scrapes.")] = "15s",
        duration: Annotated[str | None, typer.Option(help="--scrape: stop after this long (default: run on).")] = None,
        once: Annotated[bool, typer.Option("--once", help="--scrape: scrape once and exit.")] = False,
        timeout: Annotated[str, typer.Option(
            help="Bound of one whole HTTP request: connect, headers and body together.")] = "10s",
        max_body_size: Annotated[str, typer.Option(
            help="--scrape: largest /metrics body accepted (a bigger one makes the target a gap).")] = "64MiB",
        prometheus: Annotated[str | None, typer.Option(help="Base URL of a Prometheus-compatible query API.")] = None,
        start: Annotated[str | None, typer.Option(
            help="--prometheus: first sample time (default: where the last collection from there ended; "
                 "the first time, a day back).")] = None,
        end: Annotated[str | None, typer.Option(help="--prometheus / --simulate: end time (default: now).")] = None,
        step: Annotated[str | None, typer.Option(
            help="--prometheus / --simulate: resolution (default 60s; 5m with --rollups).")] = None,
        schema: Annotated[str, typer.Option(help="Metric naming: gpulens, dcgm or auto (both).")] = "auto",
        bearer_token_file: Annotated[Path | None, typer.Option(help="--prometheus: file with a bearer token.")] = None,
        ca_file: Annotated[Path | None, typer.Option(help="--prometheus: CA bundle to verify TLS.")] = None,
        insecure_skip_verify: Annotated[bool, typer.Option(
            "--insecure-skip-verify", help="--prometheus: do not verify the TLS certificate.")] = False,
        label: Annotated[list[str] | None, typer.Option(
            help="--prometheus: only series with NAME=VALUE (repeatable; values are escaped).")] = None,
        retries: Annotated[int, typer.Option(min=0, max=20, help="--prometheus: retries of a failed request.")] = 4,
        header: Annotated[list[str] | None, typer.Option(
            help="--prometheus: extra HTTP header NAME=VALUE (repeatable), e.g. X-Scope-OrgID=team for Mimir.")] = None,
        rollups: Annotated[bool, typer.Option(
            "--rollups", help="--prometheus: read the 5-minute rollups recorded by the rules in deploy/prometheus "
                              "(Prometheus, Thanos Ruler, Mimir) instead of raw series; needs --step 5m. Idle is then "
                              "decided per 5-minute rollup point.")] = False,
        kubernetes: Annotated[bool, typer.Option("--kubernetes", help="Snapshot the cluster inventory.")] = False,
        kubeconfig: Annotated[Path | None, typer.Option(help="--kubernetes: kubeconfig file.")] = None,
        tenancy_config: Annotated[Path | None, typer.Option(
            help="--kubernetes: YAML of tenant-resolution rules, the same file as the exporter's "
                 "--tenancy-config (default: the built-in rule order).")] = None,
        simulate: Annotated[bool, typer.Option("--simulate", help="Backfill simulated history.")] = False,
        scenario: Annotated[Path | None, typer.Option(help="--simulate: scenario YAML (default: built-in).")] = None,
        days: Annotated[float, typer.Option(callback=days_flag(gt=0), help="--simulate: days of history.")] = 14.0,
    ) -> None:
        if schema not in ("gpulens", "dcgm", "auto"):
            raise UserError(f"invalid --schema {schema!r}: use gpulens, dcgm or auto")
        modes = [name for name, on in (("--scrape", scrape), ("--prometheus", prometheus is not None),
                                        ("--kubernetes", kubernetes), ("--simulate", simulate)) if on]
        if len(modes) != 1:
            raise UserError("choose exactly one source: --scrape URL..., --prometheus URL, --kubernetes or --simulate"
                            + (f" (got {' '.join(modes)})" if modes else ""))
        if rollups and prometheus is None:
            raise UserError("--rollups goes with --prometheus URL (it reads rollups recorded in Prometheus)")
        if urls and not scrape:
            raise UserError(f"unexpected argument {urls[0]!r} (URLs go with --scrape)")
        with storage_failures(db):  # a full disk, a damaged block: one line naming the store
            if scrape:
                _run_scrape(list(urls or []), db, interval, duration, once, timeout, schema, max_body_size)
            elif prometheus is not None:
                _run_prometheus(prometheus, db, start, end or "now", step or ("5m" if rollups else "60s"), schema, bearer_token_file, ca_file,
                                insecure_skip_verify, list(label or []), timeout, retries, list(header or []), rollups)
            elif kubernetes:
                _run_kubernetes(db, kubeconfig, tenancy_config, timeout)
            else:
                _run_simulate(db, scenario, days, step or "60s", end)

    @app.command("export-parquet")
    def export_parquet_cmd(
        db: Annotated[Path, typer.Option(help="DuckDB store file.")] = Path("gpulens.duckdb"),
        out: Annotated[Path, typer.Option(help="Output directory (facts partitioned by date=YYYY-MM-DD).")] = Path(
            "gpulens-parquet"
        ),
    ) -> None:
        """Export the store to Hive-partitioned Parquet (facts by date, one file per dimension)."""
        from collector.parquet import export_parquet

        summary = export_parquet(str(db), out)
        total = sum(summary.rows.values())
        _say(f"exported {total} rows from {len(summary.rows)} tables to {out}")
