"""GPU health at fleet scale: the cost of a health day part and of the window-level early-warning stage.

Reads the Parquet facts ``bench_analytics.py`` generated (``<dir>/facts/gpu_samples``, ``events``; 1,000
GPUs per ``block=``), computes the health day part of each day (the per-GPU pass ``an_gpu_day``, then
``part_health`` from it, then ``part_trend_buckets`` and ``part_trend_quiet``), merges them and runs the window level (``trend_bucket_signals``: rates from the
merged buckets; ``detect``: the CUSUM; ``health.assess``: all of the window-level health stage). Prints
wall and CPU seconds side by side; on a shared machine the CPU seconds say what the work costs.

    .venv/bin/python benchmarks/bench_analytics.py --fleets 1000 --days 7 --dir /tmp/bench   # makes the facts
    .venv/bin/python benchmarks/bench_health_parts.py --dir /tmp/bench --gpus 8000 --days 7

The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb  # noqa: E402

from analytics import early_warning, gpu_day, health  # noqa: E402
from analytics.day_parts import day_windows, merge_parts  # noqa: E402
from analytics.facts import Window  # noqa: E402
from analytics.result_tables import create_result_tables  # noqa: E402
from analytics.settings import HealthRules  # noqa: E402
from collector.parquet import read_fact_parquet  # noqa: E402

START = datetime(2026, 3, 2)
T = TypeVar("T")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(fn: Callable[[], T]) -> tuple[T, float, float]:
    t0, c0 = time.perf_counter(), _cpu()
    out = fn()
    return out, time.perf_counter() - t0, _cpu() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, required=True, help="bench_analytics.py --dir (holds facts/)")
    ap.add_argument("--gpus", type=int, default=1000, help="a multiple of 1,000 (the facts' blocks)")
    ap.add_argument("--days", type=int, default=7)
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        con = duckdb.connect(str(Path(tmp) / "store.duckdb"))
        for table in ("gpu_samples", "events"):
            rel = read_fact_parquet(con, args.dir / "facts" / table)
            if rel is None:
                sys.exit(f"no {table} facts under {args.dir / 'facts'}: run bench_analytics.py --dir {args.dir} first")
            con.execute(f"CREATE VIEW f_{table} AS SELECT * FROM ({rel.sql_query()}) WHERE block < {args.gpus // 1000}")  # noqa: S608
        create_result_tables(con)
        con.execute("CREATE TEMP TABLE an_dev AS SELECT DISTINCT gpu_uuid, node FROM f_gpu_samples WHERE ts < $t",
                    {"t": START + timedelta(minutes=5)})
        rules = HealthRules()
        window = Window(START, START + timedelta(days=args.days), 3600)
        ids: list[str] = []
        seen = {"per-GPU pass": [0.0, 0.0], "part_health": [0.0, 0.0], "part_trend_buckets": [0.0, 0.0]}
        for span in day_windows(window):
            pid = f"{span.start:%Y-%m-%d}"
            con.execute("BEGIN TRANSACTION")
            steps: tuple[tuple[str, Callable[[], None]], ...] = (
                ("per-GPU pass", partial(gpu_day.build, con, span)),
                ("part_health", partial(health.insert_part_health_rows, con, pid, span)),
                ("part_trend_buckets", partial(early_warning.insert_part_trends, con, pid, span, rules.early_warning)),
            )
            for name, step in steps:
                _, wall, cpu = _timed(step)
                seen[name][0] += wall
                seen[name][1] += cpu
            gpu_day.drop(con)
            con.execute("COMMIT")
            ids.append(pid)
        rows = con.execute("SELECT count(*) FROM part_trend_buckets").fetchone()
        quiet = con.execute("SELECT count(*) FROM part_trend_quiet").fetchone()
        merge_parts(con, ids)
        signals, sig_wall, sig_cpu = _timed(lambda: early_warning.trend_bucket_signals(con, window, rules, ids))
        _, det_wall, det_cpu = _timed(lambda: early_warning.detect(signals, rules.early_warning))
        _, all_wall, all_cpu = _timed(lambda: health.assess(con, window, rules, ids))
        con.close()

    days = len(ids)
    print(f"{args.gpus} GPUs x {days} days: {rows[0] if rows else 0:,} early-warning bucket rows, "
          f"{quiet[0] if quiet else 0:,} quiet GPU-days stored as a row each")
    print(f"{'stage':<34} {'wall s':>8} {'CPU s':>8} {'per day s':>10}")
    for name, (wall, cpu) in seen.items():
        print(f"{'day part: ' + name:<34} {wall:8.2f} {cpu:8.2f} {wall / days:10.3f}")
    for name, wall, cpu in (("window: trend_bucket_signals", sig_wall, sig_cpu), ("window: detect", det_wall, det_cpu),
                            ("window: health.assess (all)", all_wall, all_cpu)):
        print(f"{name:<34} {wall:8.2f} {cpu:8.2f}")
    print(json.dumps({
        "gpus": args.gpus, "days": days, "bucket_rows": rows[0] if rows else 0, "quiet_rows": quiet[0] if quiet else 0,
        "gpu_day": {"seconds": round(seen["per-GPU pass"][0], 3), "cpu": round(seen["per-GPU pass"][1], 3)},
        "part_health": {"seconds": round(seen["part_health"][0], 3), "cpu": round(seen["part_health"][1], 3)},
        "part_trend_buckets": {"seconds": round(seen["part_trend_buckets"][0], 3),
                               "cpu": round(seen["part_trend_buckets"][1], 3)},
        "trend_bucket_signals": {"seconds": round(sig_wall, 3), "cpu": round(sig_cpu, 3)},
        "detect": {"seconds": round(det_wall, 3), "cpu": round(det_cpu, 3)},
        "assess": {"seconds": round(all_wall, 3), "cpu": round(all_cpu, 3)},
    }))


if __name__ == "__main__":
    main()
