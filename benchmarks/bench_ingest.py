"""Collector ingest rate, end to end, with a baseline measured in the same run.

* Exposition -> DuckDB: gpulens's path (vectorized polars parse of the text, mapping into the store's
  wide tables with units normalized, bulk Arrow ``INSERT OR IGNORE`` in one committed transaction) vs a
  baseline that parses with ``prometheus_client``'s text parser and inserts each sample row by row.
* query_range -> DuckDB: one day x 500 devices at 60 s from a local HTTP stand-in of the Prometheus API
  serving pre-generated matrix JSON, through ``collect_range`` (chunks, parallel queries, one
  transaction per chunk). Samples = points in the matrices received.
* Simulator backfill into a growing store: the built-in fleet, one window per day at 60 s (as
  ``gpulens collect --simulate`` and the demo do), ingest time per day as the store grows; side by side
  with the same ingest into a store whose fact tables carry the former primary keys (ART indexes).

Run: ``.venv/bin/python benchmarks/bench_ingest.py [--samples 200000] [--baseline-samples 6000] [--devices 500]
[--backfill-days 14]`` (``0`` skips a part).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import duckdb  # noqa: E402
import polars as pl  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from collector.backfill import SOURCE, history_frames  # noqa: E402
from collector.exposition import parse_exposition  # noqa: E402
from collector.mapping import to_store_frames  # noqa: E402
from collector.prometheus import HttpSettings, PrometheusClient, collect_range  # noqa: E402
from collector.schema import FACT_KEYS, FACTS  # noqa: E402
from collector.store import Store  # noqa: E402
from tests.support.store_render import render_text, series_for  # noqa: E402
from tests.support.synthetic_fleet import synthetic_frames  # noqa: E402

T0 = 1_790_000_000.0 - 1_790_000_000.0 % 86400
BASELINE_COLUMNS = ["node", "gpu", "device", "profile", "gpu_instance", "namespace", "pod", "container",
                    "tenant", "type", "reason"]


def exposition_text(samples: int) -> tuple[str, int]:
    """gpulens exposition of a synthetic fleet (timestamps on), about ``samples`` lines."""
    per_minute_per_node = 41  # lines per node per minute in the synthetic fleet (1 H200 MIG + 1 H100)
    nodes = 50
    minutes = max(1, round(samples / (per_minute_per_node * nodes)))
    text = render_text(series_for(synthetic_frames(T0, T0 + minutes * 60, 60.0, nodes=nodes), "gpulens"),
                       timestamps=True)
    return text, text.count("\n")


def ours(text: str, db: str) -> tuple[float, float]:
    """Wall and CPU seconds from text to a committed window (the store is opened once per collector, before)."""
    with Store(db) as store:
        began, cpu = time.perf_counter(), time.process_time()
        long = parse_exposition(text, "bench")
        frames = to_store_frames(long, "gpulens", "scrape")
        store.ingest_window("scrape:bench", T0, T0 + 1, frames)
        return time.perf_counter() - began, time.process_time() - cpu


def baseline(text: str, db: str) -> tuple[float, float]:
    """Wall and CPU seconds of the row-by-row baseline."""
    began, cpu = time.perf_counter(), time.process_time()
    con = duckdb.connect(db)
    cols = ", ".join(f"{c} VARCHAR" for c in BASELINE_COLUMNS)
    con.execute(f"CREATE TABLE samples (metric VARCHAR, {cols}, ts TIMESTAMP, value DOUBLE)")
    con.execute("BEGIN TRANSACTION")
    placeholders = ", ".join("?" for _ in range(len(BASELINE_COLUMNS) + 3))
    sql = f"INSERT INTO samples VALUES ({placeholders})"  # noqa: S608 - fixed columns
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            value = s.value
            if s.name.endswith("_bytes") is False and "memory" in s.name:  # unit normalization stand-in
                value = value * 1.0
            ts = None if s.timestamp is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(float(s.timestamp)))
            con.execute(sql, [s.name, *[s.labels.get(c) for c in BASELINE_COLUMNS], ts, value])
    con.execute("COMMIT")
    con.close()
    return time.perf_counter() - began, time.process_time() - cpu


def matrix_bodies(devices_target: int) -> tuple[dict[tuple[str, str], bytes], int, int]:
    """Pre-built query_range answers (built with polars): (metric, start) -> JSON body; devices; samples."""
    nodes = devices_target // 5  # 3 MIG instances + 2 whole GPUs per node
    frames = synthetic_frames(T0, T0 + 86400, 60.0, nodes=nodes, whole_gpus=2)
    series = series_for(frames, "gpulens")
    wanted = ["gpulens_device_gpu_equivalents", "gpulens_device_activity_ratio", "gpulens_device_memory_used_bytes",
              "gpulens_device_memory_total_bytes", "gpulens_allocation_gpu_equivalents"]
    series = series.filter(pl.col("metric").is_in(wanted))
    chunk_ms = 360 * 60_000
    points = series.with_columns(
        chunk=(pl.col("ts_ms") - int(T0 * 1000)) // chunk_ms,
        point=pl.concat_str(pl.lit("["), (pl.col("ts_ms") / 1000).cast(pl.Utf8), pl.lit(',"'),
                            pl.col("value").cast(pl.Utf8), pl.lit('"]')),
    )
    # The rendered label text is `k="v",...`: the same escapes as JSON for these plain values.
    per_series = points.group_by("metric", "chunk", "labels", maintain_order=True).agg(
        pl.col("point").str.join(",")
    ).with_columns(
        obj=pl.concat_str(pl.lit('{"metric":{"__name__":"'), pl.col("metric"), pl.lit('",'),
                          pl.col("labels").str.replace_all(r'(\w+)="', '"$1":"'), pl.lit('},"values":['),
                          pl.col("point"), pl.lit("]}"))
    )
    bodies: dict[tuple[str, str], bytes] = {}
    for row in per_series.group_by("metric", "chunk").agg(pl.col("obj").str.join(",")).iter_rows(named=True):
        start = f"{T0 + int(row['chunk']) * chunk_ms / 1000:.3f}"
        body = '{"status":"success","data":{"resultType":"matrix","result":[' + row["obj"] + "]}}"
        bodies[(str(row["metric"]), start)] = body.encode()
    return bodies, frames["devices"].height, series.height


def serve(bodies: dict[tuple[str, str], bytes]) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            q = {k: v[0] for k, v in urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query).items()}
            body = bodies.get((q["query"], q["start"]), b'{"status":"success","data":{"resultType":"matrix",'
                                                        b'"result":[]}}')
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def backfill_days(db: str, days: int, step: float, *, primary_keys: bool) -> list[tuple[float, float, int]]:
    """Ingest ``days`` simulated days into a fresh store, one window per day: (wall, CPU, rows) per day.

    With ``primary_keys`` the fact tables are created first with the primary keys they had before
    (the baseline); the ingest code is the same.
    """
    from gpulens.sim.fleet import SimulatedFleet
    from gpulens.sim.scenario_file import load_scenario

    if primary_keys:
        con = duckdb.connect(db)
        for table, columns in FACTS.items():
            con.execute(f"CREATE TABLE {table} ({columns}, PRIMARY KEY ({', '.join(FACT_KEYS[table])}))")
        con.close()
    fleet = SimulatedFleet(load_scenario(None))
    start = T0 - days * 86400
    out = []
    with Store(db) as store:
        for day in range(days):
            a = start + day * 86400
            frames = history_frames(fleet.history(a, a + 86400, step))
            began, cpu = time.perf_counter(), time.process_time()
            result = store.ingest_window(SOURCE, a, a + 86400, frames)
            out.append((time.perf_counter() - began, time.process_time() - cpu, result.total_rows))
        began, cpu = time.perf_counter(), time.process_time()
    out.append((time.perf_counter() - began, time.process_time() - cpu, 0))  # closing: the last checkpoint
    return out


def report_backfill(tmp: str, days: int, step: float) -> None:
    ours = backfill_days(f"{tmp}/backfill.duckdb", days, step, primary_keys=False)
    keyed = backfill_days(f"{tmp}/backfill-pk.duckdb", days, step, primary_keys=True)
    print(f"Simulator backfill: {days} days at {step:g} s, one window per day, ingest only (history excluded)")
    print(f"  {'day':>4} {'rows':>9}   {'gpulens wall / cpu':>20}   {'primary keys wall / cpu':>24}")
    for day, ((w, c, n), (kw, kc, _)) in enumerate(zip(ours, keyed, strict=True), start=1):
        label = f"{day:>4} {n:>9,}" if day <= days else f"{'closing store':>14}"
        print(f"  {label}   {w:8.2f} s / {c:5.2f} s   {kw:11.2f} s / {kc:5.2f} s")
    k = min(3, days)
    for name, runs, path in (("gpulens", ours, "backfill"), ("primary keys", keyed, "backfill-pk")):
        first = sum(c for _, c, _ in runs[:k]) / k
        last = sum(c for _, c, _ in runs[days - k:days]) / k
        total_wall, total_cpu = sum(w for w, _, _ in runs), sum(c for _, c, _ in runs)
        size = Path(f"{tmp}/{path}.duckdb").stat().st_size / 2**20
        print(f"  {name:>12}: {total_wall:6.1f} s wall, {total_cpu:6.1f} s CPU in all; CPU per day, first {k} "
              f"{first:.2f} s, last {k} {last:.2f} s (x{last / first:.2f}); file {size:,.0f} MiB")


def exposition_vs_baseline(samples: int, baseline_samples: int, tmp: str) -> None:
    """gpulens's path on ``samples`` lines and on the baseline's input, then the baseline."""
    big, n_big = exposition_text(samples)
    small, n_small = exposition_text(baseline_samples)
    # A collector is a long-running process: the modules that polars and Arrow load on first use are
    # loaded once here, outside the timings (about 0.3 s, paid once per process).
    to_store_frames(parse_exposition(exposition_text(50)[0], "warm-up"), "gpulens", "scrape")
    (t_small_ours, c_small_ours) = ours(small, f"{tmp}/ours-small.duckdb")
    (t_first, c_first) = ours(big, f"{tmp}/ours-first.duckdb")
    # A running collector's windows: three more, each into a fresh store; the median by wall time.
    (t_ours, c_ours) = sorted(ours(big, f"{tmp}/ours-{i}.duckdb") for i in range(3))[1]
    (t_base, c_base) = baseline(small, f"{tmp}/base.duckdb")
    t_parse = time.perf_counter()
    sum(len(f.samples) for f in text_string_to_metric_families(small))
    t_parse = time.perf_counter() - t_parse
    rate_ours, rate_small, rate_base = n_big / t_ours, n_small / t_small_ours, n_small / t_base
    print("Exposition text -> DuckDB (parse, labels to columns, units, committed); wall and process CPU")
    print(f"  gpulens   {n_big:>9,} samples  {t_ours:7.2f} s (cpu {c_ours:6.2f} s)  {rate_ours:>11,.0f} samples/s"
          f"  ({n_big / c_ours:,.0f} per CPU-second; median of 3)")
    print(f"  gpulens   {n_big:>9,} samples  {t_first:7.2f} s (cpu {c_first:6.2f} s)  {n_big / t_first:>11,.0f} samples/s"
          f"  (the process's first window of this size)")
    print(f"  gpulens   {n_small:>9,} samples  {t_small_ours:7.2f} s (cpu {c_small_ours:6.2f} s)  "
          f"{rate_small:>11,.0f} samples/s  (the baseline's input)")
    print(f"  baseline  {n_small:>9,} samples  {t_base:7.2f} s (cpu {c_base:6.2f} s)  {rate_base:>11,.0f} samples/s"
          f"  ({n_small / c_base:,.0f} per CPU-second; prometheus_client parser alone: {n_small / t_parse:,.0f}/s)")
    print(f"  ratio gpulens/baseline: {rate_ours / rate_base:.0f}x wall, "
          f"{(n_big / c_ours) / (n_small / c_base):.0f}x per CPU-second (same input: {rate_small / rate_base:.0f}x)")


def query_range(devices_target: int, tmp: str) -> None:
    """One day x ``devices_target`` devices from the HTTP stand-in through ``collect_range``."""
    t_build = time.perf_counter()
    bodies, devices, points = matrix_bodies(devices_target)
    t_build = time.perf_counter() - t_build
    server, url = serve(bodies)
    try:
        with Store(f"{tmp}/range.duckdb") as store, PrometheusClient(HttpSettings(url)) as client:
            began, cpu = time.perf_counter(), time.process_time()
            summary = collect_range(store, client, start=T0, end=T0 + 86400, step=60.0, schema="gpulens",
                                    max_points=360, metrics=sorted({m for m, _ in bodies}))
            t_range, c_range = time.perf_counter() - began, time.process_time() - cpu
            stored = store.count("device_samples")
    finally:
        server.shutdown()
    print(f"query_range -> DuckDB: 1 day x {devices} devices at 60 s "
          f"({len(summary.windows)} windows, JSON prepared in {t_build:.1f} s)")
    print(f"  {points:,} samples received, {stored:,} device rows stored in {t_range:.2f} s "
          f"(cpu {c_range:.2f} s, server included): {points / t_range:,.0f} samples/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--samples", type=int, default=200_000, help="exposition lines for gpulens's path (0: skip)")
    parser.add_argument("--baseline-samples", type=int, default=6_000, help="exposition lines for the baseline")
    parser.add_argument("--devices", type=int, default=500, help="devices for the query_range run (0: skip)")
    parser.add_argument("--backfill-days", type=int, default=14, help="days of simulator backfill (0: skip)")
    parser.add_argument("--backfill-step", type=float, default=60.0, help="seconds between simulated samples")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.samples > 0:
            exposition_vs_baseline(args.samples, args.baseline_samples, tmp)
        if args.devices > 0:
            query_range(args.devices, tmp)
        if args.backfill_days > 0:
            report_backfill(tmp, args.backfill_days, args.backfill_step)


if __name__ == "__main__":
    main()
