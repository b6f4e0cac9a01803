"""The report and the dashboard's queries on a simulated store: time per query, per report, per page load.

Builds a store once (simulator backfill of the default fleet -> analyze -> recommend), then times, in
the same process and alternating rounds:

* each query the app and the report run, with a held connection (the report) and with a connection
  opened per query (the app, so writers are never locked out), against a baseline that loads the
  whole result table into polars and aggregates there (what a page would do without SQL pushdown);
* ``write_report`` end to end.

    .venv/bin/python benchmarks/bench_report.py                    # 7 days at 300 s (about 1 minute to build)
    .venv/bin/python benchmarks/bench_report.py --days 2 --rounds 3  # quick look
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb  # noqa: E402
import polars as pl  # noqa: E402

from analytics.recommend import recommend  # noqa: E402
from analytics.run import analyze  # noqa: E402
from analytics.settings import AnalysisSettings  # noqa: E402
from collector.backfill import backfill_simulated  # noqa: E402
from dashboards.report import write_report  # noqa: E402
from dashboards.report.data import StoreReader  # noqa: E402

DAY = 86400


def build(path: Path, days: int, step: float) -> None:
    end = 1_790_000_000.0 - 1_790_000_000.0 % 3600
    t0 = time.perf_counter()
    backfill_simulated(path, None, end - days * DAY, end, step)
    t1 = time.perf_counter()
    analyze(path, AnalysisSettings(window_seconds=days * DAY, bucket_seconds=300))
    t2 = time.perf_counter()
    recommend(path)
    t3 = time.perf_counter()
    print(f"store built: backfill {t1 - t0:.1f} s, analyze {t2 - t1:.1f} s, recommend {t3 - t2:.1f} s")


def _naive_capacity(path: Path) -> pl.DataFrame:
    """Baseline: every idle_capacity row of the newest run into polars, pivot there."""
    with duckdb.connect(str(path), read_only=True) as con:
        run = con.execute("SELECT run_id FROM analysis_runs ORDER BY created_at DESC LIMIT 1").fetchall()[0]
        assert run is not None
        rows = con.sql("SELECT * FROM idle_capacity WHERE run_id = ?", params=[run[0]]).pl()
    hours = (rows["bucket_end"] - rows["bucket_start"]).dt.total_seconds() / 3600
    return (
        rows.with_columns(ge=pl.col("ge_hours") / hours)
        .pivot(on="state", index="bucket_start", values="ge", aggregate_function="sum")
        .sort("bucket_start")
    )


def _naive_tenants(path: Path) -> pl.DataFrame:
    """Baseline: every idle_capacity row into polars, group by tenant and state there."""
    with duckdb.connect(str(path), read_only=True) as con:
        run = con.execute("SELECT run_id FROM analysis_runs ORDER BY created_at DESC LIMIT 1").fetchall()[0]
        assert run is not None
        rows = con.sql("SELECT * FROM idle_capacity WHERE run_id = ?", params=[run[0]]).pl()
    return (
        rows.filter(pl.col("tenant").is_not_null())
        .pivot(on="state", index="tenant", values="ge_hours", aggregate_function="sum")
        .sort("tenant")
    )


def median_ms(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Median and max wall time of ``fn`` in milliseconds over ``rounds`` calls."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--step", type=float, default=300.0, help="sample interval of the backfill (s)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--store", type=Path, help="reuse (or create) the store here instead of a temp dir")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = args.store or Path(tmp) / "bench.duckdb"
        if not path.exists():
            build(path, args.days, args.step)
        held = StoreReader.open(path)
        lazy = StoreReader.per_query(path)
        with duckdb.connect(str(path), read_only=True) as con:
            counts = {
                t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0]  # noqa: S608 (our table names)
                for t in ("device_samples", "idle_capacity", "chargeback", "recommendations")
            }
        print("rows:", ", ".join(f"{t} {c[0]:,}" for t, c in counts.items() if c))

        first = held.recommendations().filter(pl.col("scope") == "workload").row(0, named=True)
        workload = (first["target_namespace"], first["target_kind"], first["target_name"])
        queries: list[tuple[str, Callable[[StoreReader], object], Callable[[], object] | None]] = [
            ("capacity_states (page: 1000 points)", lambda r: r.run("capacity_states", max_points=1000),
             lambda: _naive_capacity(path)),
            ("tenant_usage", lambda r: r.run("tenant_usage"), lambda: _naive_tenants(path)),
            ("chargeback_by_account", lambda r: r.run("chargeback_by_account"), None),
            ("isolation_terms(device)", lambda r: r.run("isolation_terms", scope="device"), None),
            ("health", lambda r: r.run("health"), None),
            ("recommendations", lambda r: r.run("recommendations"), None),
            ("workload_series (one workload)", lambda r: r.run(
                "workload_series", namespace=workload[0], kind=workload[1], name=workload[2]), None),
        ]
        print()
        print("| query | held connection (report) | per-query connection (app) | baseline: load all rows, aggregate in polars | baseline / per-query |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, fn, baseline in queries:
            h = median_ms(lambda fn=fn: fn(held), args.rounds)  # type: ignore[misc]
            q = median_ms(lambda fn=fn: fn(lazy), args.rounds)  # type: ignore[misc]
            if baseline is not None:
                b = median_ms(baseline, args.rounds)
                print(f"| {name} | {h[0]:.1f} ms | {q[0]:.1f} ms | {b[0]:.1f} ms | {b[0] / q[0]:.1f}x |")
            else:
                print(f"| {name} | {h[0]:.1f} ms | {q[0]:.1f} ms | - | - |")
        held.close()

        out = Path(tmp) / "report"
        r = median_ms(lambda: write_report(path, out), max(3, args.rounds // 2))
        size = (out / "index.html").stat().st_size
        print()
        print(f"write_report: median {r[0]:.0f} ms (max {r[1]:.0f} ms); index.html {size / 1024:.0f} KiB, "
              f"{(out / 'index.html').read_text(encoding='utf-8').count('<svg')} inline charts")


if __name__ == "__main__":
    main()
