"""One new day of a fleet, this checkout against another commit, side by side in one run.

The facts are ``bench_analytics.py``'s (``--dir`` of an earlier run of it: ``facts-claims`` with at least two
days). This checkout analyses the first day into a store; then the next day (the same one-day window, a day
later) runs on a fresh copy of that analysed store, alternately with this checkout and with ``--against``
(a commit, checked out in a temporary git worktree), each run in a fresh process, as many rounds as
``--order`` lists. Printed per run: wall and CPU seconds, peak RSS (the process's own high-water mark), the
days computed (1: the new day), and whether its result rows match the first run's; then the sums and their
ratio.

    .venv/bin/python benchmarks/bench_next_day_against.py --dir /tmp/nd100k --against HEAD~1 --memory-limit 1536MB
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

HERE = Path(__file__).resolve().parent.parent

_CHILD = r"""
import json, shutil, sys, time
from datetime import timedelta
from pathlib import Path
sys.path.insert(0, "benchmarks")
from bench_analytics import START, _peak_rss_gib, _totals
from analytics.run import analyze
from analytics.settings import AnalysisSettings
work, limit = Path(sys.argv[1]), sys.argv[2]

shutil.copy(work / "analysed.duckdb", work / "next.duckdb")
settings = AnalysisSettings(window_seconds=86400, bucket_seconds=3600, end=START + timedelta(days=2),
                            parquet_dir=work / "facts", **({"memory_limit": limit} if limit else {}))
t, c = time.perf_counter(), time.process_time()
summary = analyze(work / "next.duckdb", settings)
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": time.process_time() - c,
                  "rss_gib": _peak_rss_gib(), "computed": len(summary.days_computed),
                  "totals": _totals(work / "next.duckdb", summary.run_id)}))
"""


def _prepare(facts: Path, work: Path, gpus: int, block: int) -> None:
    """The first day analysed by this checkout (``analysed.duckdb``), the second day's files beside it."""
    from bench_analytics import START, make_store, subset

    from analytics.run import analyze
    from analytics.settings import AnalysisSettings

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    subset(facts, work / "facts", gpus // block, 1)
    make_store(work / "analysed.duckdb", gpus)
    t = time.perf_counter()
    analyze(work / "analysed.duckdb", AnalysisSettings(window_seconds=86400, bucket_seconds=3600,
                                                       end=START + timedelta(days=1), parquet_dir=work / "facts"))
    print(f"the first day analysed by this checkout in {time.perf_counter() - t:.1f} s", flush=True)
    subset(facts, work / "facts", gpus // block, 2)


def _run(tree: Path, work: Path, limit: str) -> dict:  # type: ignore[type-arg]
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, "-c", _CHILD, str(work), limit], cwd=tree, env=env, capture_output=True,
                          text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the next day failed in {tree}:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, required=True, help="a bench_analytics.py --dir with two days of facts")
    ap.add_argument("--against", required=True, help="the commit to compare with (checked out in a worktree)")
    ap.add_argument("--gpus", type=int, default=100_000, help="fleet size (default 100000; at most the facts')")
    ap.add_argument("--order", default="against,this,this,against",
                    help="the runs in order, each 'this' or 'against' (default against,this,this,against)")
    ap.add_argument("--memory-limit", default="", help="DuckDB's memory limit for every run (default: analyze's)")
    args = ap.parse_args()
    meta = json.loads((args.dir / "facts.json").read_text())
    if meta.get("days", 0) < 2 or meta.get("gpus", 0) < args.gpus or args.gpus % meta["block"]:
        ap.error(f"--dir {args.dir} holds {meta.get('gpus')} GPUs x {meta.get('days')} days in blocks of "
                 f"{meta.get('block')}: run bench_analytics.py --fleets {args.gpus} --days 1 --dir {args.dir} first")
    order = args.order.split(",")
    if not order or set(order) - {"this", "against"}:
        ap.error("--order lists 'this' and 'against', comma-separated")
    work = args.dir / f"next-day-{args.gpus}"
    other = Path(tempfile.mkdtemp(prefix="gpulens-against-"))
    subprocess.run(["git", "-C", str(HERE), "worktree", "add", "--detach", "-f", str(other), args.against],
                   check=True, capture_output=True)
    try:
        _prepare(args.dir / "facts-claims", work, args.gpus, meta["block"])
        print(f"load average before the runs: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        runs: dict[str, list[dict]] = {"this": [], "against": []}  # type: ignore[type-arg]
        first = None
        for name in order:
            r = _run(HERE if name == "this" else other, work, args.memory_limit)
            first = first or r["totals"]
            runs[name].append(r)
            print(f"{name:8s} {r['seconds']:7.2f} s {r['cpu']:7.1f} CPU s  peak RSS {r['rss_gib']:.2f} GiB  "
                  f"days computed {r['computed']}  the same rows as the first run: {r['totals'] == first}", flush=True)
        sums = {k: sum(r["seconds"] for r in v) for k, v in runs.items() if v}
        if len(sums) == 2:
            print(f"sum: this {sums['this']:.2f} s, {args.against} {sums['against']:.2f} s: "
                  f"{sums['this'] / sums['against']:.2f}x (memory limit {args.memory_limit or 'the default'})")
        print(f"load average after the runs: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(other)], check=False,
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
