"""The report of a large fleet's week: ``write_report`` on an analysed 100,000-GPU week, beside a tenth of it.

The fleet is ``bench_analytics.py``'s (``make_store``, ``make_facts``): G GPUs for D days, sampled every
``--interval`` seconds (300 by default: the 5-minute rollups a fleet this size keeps for a week; the report
reads the analysis's hourly rows, whose count does not depend on the sampling), as Parquet in blocks of a
tenth of the fleet. Side by side in one run, each step in a fresh child process (its own peak RSS): the
first block (G/10 GPUs) and the whole fleet are each analysed once (``analyze``, hourly buckets), then the
report of each is written ``--rounds`` times. Printed: rows the report reads (``idle_capacity``,
``chargeback``), render wall and CPU seconds (median of the rounds), peak RSS, and the ratio of the whole
fleet's render time to the tenth's (10x the GPUs). The last line is JSON.

    .venv/bin/python benchmarks/bench_report_fleet.py --gpus 100000 --days 7 --dir /tmp/report100k
    .venv/bin/python benchmarks/bench_report_fleet.py --gpus 10000 --days 2 --dir /tmp/report10k   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_analytics import (  # noqa: E402
    START,
    _cpu_seconds,
    _in_child,
    _peak_rss_gib,
    make_facts,
    make_store,
    subset,
)


def _analyze(store: Path, facts: Path, days: int, queue) -> None:  # type: ignore[no-untyped-def]
    import duckdb

    from analytics.run import analyze
    from analytics.settings import AnalysisSettings

    t0, c0 = time.perf_counter(), _cpu_seconds()
    summary = analyze(store, AnalysisSettings(window_seconds=days * 86400, bucket_seconds=3600,
                                              end=START + timedelta(days=days), parquet_dir=facts))
    with duckdb.connect(str(store), read_only=True) as con:
        rows = {t: con.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", [summary.run_id]).fetchone()[0]  # noqa: S608
                for t in ("idle_capacity", "fragmentation", "chargeback")}
    queue.put({"seconds": time.perf_counter() - t0, "cpu": _cpu_seconds() - c0, "rss_gib": _peak_rss_gib(),
               "reconciled": summary.reconciled, "rows": rows})


def _report(store: Path, out: Path, queue) -> None:  # type: ignore[no-untyped-def]
    from dashboards.report import write_report

    shutil.rmtree(out, ignore_errors=True)
    t0, c0 = time.perf_counter(), _cpu_seconds()
    index = write_report(store, out)
    queue.put({"seconds": time.perf_counter() - t0, "cpu": _cpu_seconds() - c0, "rss_gib": _peak_rss_gib(),
               "index_kib": index.stat().st_size / 1024})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=100_000, help="GPUs of the whole fleet (a multiple of 80; default 100,000)")
    ap.add_argument("--days", type=int, default=7, help="days of history (default 7)")
    ap.add_argument("--interval", type=int, default=300, help="seconds between samples (default 300)")
    ap.add_argument("--rounds", type=int, default=3, help="reports written per fleet (default 3; the median is shown)")
    ap.add_argument("--dir", type=Path, required=True, help="work folder (facts generated there are reused)")
    args = ap.parse_args()
    if args.gpus % 80 or args.days < 1 or args.rounds < 1:
        ap.error("--gpus must be a multiple of 80, --days and --rounds at least 1")
    root: Path = args.dir
    block = args.gpus // 10
    marker = root / "facts.json"
    wanted = {"gpus": args.gpus, "days": args.days, "interval": args.interval}
    t0 = time.perf_counter()
    if not (marker.exists() and json.loads(marker.read_text()) == wanted):
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        make_facts(root / "facts", args.gpus, args.days, block, args.interval)
        marker.write_text(json.dumps(wanted))
    print(f"{args.gpus:,} GPUs x {args.days} d at {args.interval} s: facts ready in {time.perf_counter() - t0:.1f} s",
          flush=True)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs", flush=True)
    results = {}
    for gpus in (block, args.gpus):
        work = root / f"fleet-{gpus}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        subset(root / "facts", work / "facts", gpus // block, args.days)
        make_store(work / "store.duckdb", gpus)
        analysed = _in_child(_analyze, work / "store.duckdb", work / "facts", args.days)
        renders = [_in_child(_report, work / "store.duckdb", work / "report") for _ in range(args.rounds)]
        med = statistics.median(r["seconds"] for r in renders)
        each = ", ".join(f"{r['seconds']:.2f}" for r in renders)
        results[gpus] = {"analyze": analysed, "renders": renders, "render_median_s": med,
                         "render_median_cpu": statistics.median(r["cpu"] for r in renders)}
        print(f"{gpus:>8,} GPUs: analyze {analysed['seconds']:.1f} s ({analysed['cpu']:.1f} CPU s, "
              f"{analysed['rss_gib']:.2f} GiB), rows {analysed['rows']}; report median {med:.2f} s "
              f"({results[gpus]['render_median_cpu']:.2f} CPU s) of {each}, "
              f"peak RSS {max(r['rss_gib'] for r in renders):.2f} GiB, index.html {renders[0]['index_kib']:.0f} KiB",
              flush=True)
    ratio = results[args.gpus]["render_median_s"] / results[block]["render_median_s"]
    print(f"report of {args.gpus:,} GPUs / of {block:,}: {ratio:.2f}x the time for 10x the GPUs")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(json.dumps({"gpus": args.gpus, "days": args.days, "interval": args.interval, "ratio": ratio,
                      "fleets": results}, default=str))


if __name__ == "__main__":
    main()
