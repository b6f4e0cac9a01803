"""One day of a large fleet analysed by node ranges on W workers, the way the fleet-workers Indexed Job runs it.

The fleet is ``bench_analytics.py``'s (``make_store``, ``make_facts``: G GPUs sampled every 60 s for one day, in
Parquet partitioned by GPU block and day, one block per worker, so DuckDB's generator writes a block's files as
it goes and never holds the day). Each step runs in a fresh child process (its own peak RSS), one after another:

- the floor: one plain grouping of each fact the analysis reads (device samples, allocations, GPU samples);
- with ``--single`` (default up to 200,000 GPUs): ``analyze`` of the day on one node;
- worker i of W: ``analyze --slice i/W --node-ranges W --dimensions-from store`` (its store a copy of the
  central one without facts, then its one (day, node range) part);
- the merge: a copy of the central store takes the workers' parts (``--parts-from``: their sums worker by worker,
  their idle and fragmentation rows on a thread while the run goes on) and analyses the day with ``--node-ranges W`` (no fact of a part
  read again; the window-level stages read what they read).

Printed side by side: wall and CPU seconds and peak RSS of each, the merge's share of workers + merge, and
whether the merged rows equal the single run's (idle, fragmentation, chargeback totals). The last line is JSON.

Disk: about 0.2 GiB of Parquet per 100,000 GPU-days at 60 s (measured at 20,000 GPUs: 0.04 GiB, the generated
fleet compresses well), so 1,000,000 GPUs x 1 day needs about 2 GiB for the facts, plus about 0.016 GiB of worker
store per 10,000 GPUs of its range (1.6 GiB in all at 1M), two copies of the merged store and DuckDB's spill in --dir:
leave about 10 GiB.

    .venv/bin/python benchmarks/bench_fleet_split.py --gpus 20000 --workers 2 --dir /tmp/split20k
    .venv/bin/python benchmarks/bench_fleet_split.py --gpus 100000 --workers 4 --dir /tmp/split100k
    .venv/bin/python benchmarks/bench_fleet_split.py --gpus 1000000 --workers 16 --dir /big/split1m   # --single off
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.day_parts import ARRIVING_ROWS  # noqa: E402
from benchmarks.bench_analytics import (  # noqa: E402
    FLOOR_ALL_FACTS,
    START,
    _cpu_seconds,
    _floor,
    _in_child,
    _peak_rss_gib,
    _totals,
    make_facts,
    make_store,
)

SINGLE_UP_TO = 200_000
"""Above this many GPUs the single-node run is off unless ``--single`` asks for it."""


def _settings(facts: Path, ranges: int, memory_limit: str | None = None):  # type: ignore[no-untyped-def]
    from analytics.settings import AnalysisSettings

    s = AnalysisSettings(window_seconds=86400, bucket_seconds=3600, end=START + timedelta(days=1),
                         parquet_dir=facts, sample_interval_seconds=60, node_ranges=ranges)
    return s.model_copy(update={"memory_limit": memory_limit}) if memory_limit else s


def _single(store: Path, work: Path, facts: Path, queue) -> None:  # type: ignore[no-untyped-def]
    from analytics.run import analyze

    db = work / "single.duckdb"
    shutil.copy(store, db)
    t0, c0 = time.perf_counter(), _cpu_seconds()
    summary = analyze(db, _settings(facts, 1))
    queue.put({"seconds": time.perf_counter() - t0, "cpu": _cpu_seconds() - c0, "rss_gib": _peak_rss_gib(),
               "totals": _totals(db, summary.run_id), "phases": summary.phase_seconds})


def _worker(store: Path, work: Path, facts: Path, index: int, count: int, queue) -> None:  # type: ignore[no-untyped-def]
    from analytics.run import compute_parts
    from analytics.slices import Slice, analyze_ranges, copy_dimensions

    db = work / "workers" / f"fleet-{index}.duckdb"
    t0, c0 = time.perf_counter(), _cpu_seconds()
    copy_dimensions(store, db)
    done = analyze_ranges(db, _settings(facts, count), Slice(index, count), compute_parts, lambda: START)
    queue.put({"seconds": time.perf_counter() - t0, "cpu": _cpu_seconds() - c0, "rss_gib": _peak_rss_gib(),
               "parts": [p.label for p in done], "store_gib": db.stat().st_size / 1024**3})


def _merge(store: Path, work: Path, facts: Path, count: int, memory_limit: str | None, queue) -> None:  # type: ignore[no-untyped-def]
    """As ``analyze --parts-from``: the parts' sums copied first, their idle and fragmentation rows while the run goes on."""
    from analytics.run import analyze

    db = work / "central.duckdb"
    shutil.copy(store, db)
    t0, c0 = time.perf_counter(), _cpu_seconds()
    by_table: dict[str, tuple[int, float]] = {}
    added: list[int] = []
    summary = analyze(db, _settings(facts, count, memory_limit), parts_from=sorted((work / "workers").glob("*.duckdb")),
                      imported=lambda _store, n: added.append(n), copied=by_table)
    copied = sum(added)
    imported = sum(seconds for table, (_, seconds) in by_table.items() if table not in ARRIVING_ROWS)
    queue.put({"seconds": time.perf_counter() - t0, "cpu": _cpu_seconds() - c0, "rss_gib": _peak_rss_gib(),
               "import_seconds": imported, "import_by_table": by_table, "parts_copied": copied, "reused": summary.days_reused,
               "computed": len(summary.days_computed), "totals": _totals(db, summary.run_id),
               "phases": summary.phase_seconds})


def _window_again(work: Path, facts: Path, count: int, memory_limit: str | None, queue) -> None:  # type: ignore[no-untyped-def]
    """The merge's window-level stages alone: a copy of the merged store analysed again, every part reused."""
    from analytics.run import analyze

    db = work / "central-again.duckdb"
    shutil.copy(work / "central.duckdb", db)
    t0, c0 = time.perf_counter(), _cpu_seconds()
    summary = analyze(db, _settings(facts, count, memory_limit))
    queue.put({"seconds": time.perf_counter() - t0, "cpu": _cpu_seconds() - c0, "rss_gib": _peak_rss_gib(),
               "reused": summary.days_reused, "computed": len(summary.days_computed), "phases": summary.phase_seconds})
    db.unlink()


def _copy_again(root: Path, rounds: int) -> None:
    """The merge's copy of the last run's worker parts, a connection per worker against one for all, alternating."""
    from analytics.day_parts import import_parts, import_parts_from

    workers = sorted((root / "run" / "workers").glob("*.duckdb"))
    db = root / "run" / "copy-again.duckdb"
    for _ in range(rounds):
        for how in ("a connection per worker", "one connection"):
            shutil.copy(root / "store.duckdb", db)
            t0 = time.perf_counter()
            if how == "one connection":
                n = sum(k for _, k in import_parts_from(db, workers))
            else:
                n = sum(import_parts(db, w) for w in workers)
            print(f"{how}: {n} parts of {len(workers)} workers in {time.perf_counter() - t0:.2f} s, "
                  f"store {db.stat().st_size / 1024**3:.2f} GiB", flush=True)
            db.unlink()


def _merge_again(root: Path, count: int, memory_limit: str | None) -> None:
    work = root / "run"
    last = work / "split.json"
    if not last.is_file():
        raise SystemExit(f"--merge-again: no {last}; run the benchmark once without it")
    before = json.loads(last.read_text())
    merge = _in_child(_merge, root / "store.duckdb", work, root / "facts", count, memory_limit)
    workers = sum(w["seconds"] for w in before["worker_runs"])
    print(f"merge again: {merge['seconds']:.2f} s, {merge['cpu']:.2f} CPU s, {merge['rss_gib']:.2f} GiB (the last run's "
          f"merge {before['merge']['seconds']:.2f} s); share of its workers ({workers:.1f} s) + merge: "
          f"{merge['seconds'] / (workers + merge['seconds']):.1%}")
    print(f"sums copied first: {merge['import_seconds']:.2f} s of inserts; " + ", ".join(
        f"{t} {n:,} rows {sec:.2f}s" for t, (n, sec) in sorted(merge["import_by_table"].items(), key=lambda kv: -kv[1][1])[:6]))
    print("merge phases: " + ", ".join(f"{k} {v:.2f}s" for k, v in merge["phases"].items()))
    print(f"merged totals equal the last run's: {merge['totals'] == before['merge']['totals']}")
    print(json.dumps(merge, default=str))


def _size_gib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1024**3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=20_000, help="GPUs of the fleet (default 20,000)")
    ap.add_argument("--workers", type=int, default=2, help="workers = node ranges of the day (default 2)")
    ap.add_argument("--dir", type=Path, required=True,
                    help="work folder; facts generated there are reused by a later run of the same size")
    ap.add_argument("--single", action=argparse.BooleanOptionalAction, default=None,
                    help=f"also analyse the day on one node (default: on up to {SINGLE_UP_TO:,} GPUs)")
    ap.add_argument("--merge-memory-limit", default=None,
                    help="DuckDB memory limit of the merge (default: analyze's); the workers keep analyze's default")
    ap.add_argument("--window-again", action="store_true",
                    help="only analyse the last run's merged store again (its parts reused): the merge's window-level "
                         "stages alone, to compare a change to them with the last run's merge phases")
    ap.add_argument("--merge-again", action="store_true",
                    help="only run the merge again on the last run's worker stores (a fresh copy of the central store), "
                         "its share against the workers' times that run recorded (run/split.json)")
    ap.add_argument("--copy-again", type=int, default=0, metavar="ROUNDS",
                    help="only copy the last run's worker parts into a copy of the central store, a connection per "
                         "worker against one connection for all, alternating, ROUNDS times each")
    args = ap.parse_args()
    if args.copy_again:
        if not (args.dir / "run" / "workers").is_dir():
            ap.error(f"--copy-again: no worker stores in {args.dir / 'run' / 'workers'}; run the benchmark once without it")
        _copy_again(args.dir, args.copy_again)
        return
    if args.merge_again:
        _merge_again(args.dir, args.workers, args.merge_memory_limit)
        return
    if args.window_again:
        work = args.dir / "run"
        if not (work / "central.duckdb").is_file():
            ap.error(f"--window-again: no merged store in {work}; run the benchmark once without it")
        again = _in_child(_window_again, work, args.dir / "facts", args.workers, args.merge_memory_limit)
        print(f"window stages again: {again['seconds']:.2f} s, {again['cpu']:.2f} CPU s, {again['rss_gib']:.2f} GiB; "
              f"parts reused {again['reused']}, computed {again['computed']}")
        print("phases: " + ", ".join(f"{k} {v:.2f}s" for k, v in again["phases"].items()))
        print(json.dumps(again, default=str))
        return
    if args.workers < 1 or args.gpus < 8 * args.workers:
        ap.error("--workers must be at least 1 and --gpus at least 8 per worker (a node each)")
    single_on = args.single if args.single is not None else args.gpus <= SINGLE_UP_TO
    root: Path = args.dir
    facts, store = root / "facts", root / "store.duckdb"
    marker = root / "facts.json"
    wanted = {"gpus": args.gpus, "block": -(-args.gpus // args.workers), "days": 1}
    t0 = time.perf_counter()
    if marker.exists() and json.loads(marker.read_text()) == wanted and store.exists():
        print(f"reusing the facts in {facts}")
    else:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        make_facts(facts, args.gpus, 1, wanted["block"])
        make_store(store, args.gpus)
        marker.write_text(json.dumps(wanted))
    print(f"{args.gpus:,} GPUs x 1 day at 60 s: {args.gpus * 1440:,} device samples, facts {_size_gib(facts):.2f} GiB "
          f"(made in {time.perf_counter() - t0:.1f} s)", flush=True)
    work = root / "run"
    shutil.rmtree(work, ignore_errors=True)
    (work / "workers").mkdir(parents=True)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs", flush=True)
    floor = _in_child(_floor, facts, FLOOR_ALL_FACTS)
    print(f"all-facts floor: {floor['seconds']:.2f} s, {floor['cpu']:.2f} CPU s, {floor['rss_gib']:.2f} GiB", flush=True)
    single = _in_child(_single, store, work, facts) if single_on else None
    workers = []
    for i in range(args.workers):
        workers.append(_in_child(_worker, store, work, facts, i, args.workers))
        w = workers[-1]
        print(f"worker {i}/{args.workers}: {w['seconds']:.2f} s, {w['cpu']:.2f} CPU s, {w['rss_gib']:.2f} GiB", flush=True)
    merge = _in_child(_merge, store, work, facts, args.workers, args.merge_memory_limit)
    total = sum(w["seconds"] for w in workers) + merge["seconds"]
    total_cpu = sum(w["cpu"] for w in workers) + merge["cpu"]
    rows = [("all-facts floor", floor), *([("single node", single)] if single else []),
            *((f"worker {i}/{args.workers}", w) for i, w in enumerate(workers)), ("merge", merge)]
    print(f"{'step':<18} {'wall s':>8} {'CPU s':>8} {'peak RSS':>10}")
    for name, r in rows:
        print(f"{name:<18} {r['seconds']:>8.2f} {r['cpu']:>8.2f} {r['rss_gib']:>8.2f} G", flush=True)
    share = merge["seconds"] / total
    print(f"merge share of workers + merge: {share:.1%} wall, {merge['cpu'] / total_cpu:.1%} CPU; slowest worker "
          f"{max(w['seconds'] for w in workers):.2f} s; largest worker RSS {max(w['rss_gib'] for w in workers):.2f} GiB")
    print(f"merge's inserts of the parts' sums (before its stages; idle and fragmentation rows on a thread during "
          f"them): {merge['import_seconds']:.2f} s; " + ", ".join(
        f"{t} {n:,} rows {sec:.2f}s" for t, (n, sec) in sorted(merge["import_by_table"].items(), key=lambda kv: -kv[1][1])))
    print("merge phases: " + ", ".join(f"{k} {v:.2f}s" for k, v in merge["phases"].items()))
    same = None if single is None else single["totals"] == merge["totals"]
    if single is not None:
        print(f"merged totals equal the single node's: {same}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    result = json.dumps({"gpus": args.gpus, "workers": args.workers, "facts_gib": _size_gib(facts), "floor": floor,
                         "single": single, "worker_runs": workers, "merge": merge, "merge_share_wall": share,
                         "merge_share_cpu": merge["cpu"] / total_cpu, "same_as_single": same}, default=str)
    (work / "split.json").write_text(result)
    print(result)


if __name__ == "__main__":
    main()
