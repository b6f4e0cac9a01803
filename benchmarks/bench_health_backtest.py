"""Health backtest: would `analyze` have flagged failing GPUs early, and how early, without crying wolf?

Simulates a fault fleet (``gpulens/sim/fault_fleet.py``: degrading GPUs with a known onset and hard
failure, sudden failures without precursors, healthy look-alikes), then replays ``health.assess`` as a
deployment would run it: every hour, over the trailing window, on data before that hour only. A GPU is
*flagged* when it is a drain candidate (what ``gpulens remediate`` taints). A failing GPU counts from
its first flag before its failure (and is not looked at after it); any flag on another GPU is a false
alarm. Each run's window is cut into UTC-day parts as ``analyze`` does (``part_health``,
``part_trend_buckets``); a day seen whole by an earlier run is reused.

- precision = failing GPUs flagged before failing / all GPUs ever flagged
- recall = failing GPUs flagged before failing / failing GPUs (sudden failures included)
- lead = failure time - first flag (hours); the median over the flagged failing GPUs

    .venv/bin/python benchmarks/bench_health_backtest.py                   # 40 nodes x 8 GPUs, 5 days
    .venv/bin/python benchmarks/bench_health_backtest.py --nodes 20 --days 4 --seed 2

The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import duckdb  # noqa: E402

from analytics import health  # noqa: E402
from analytics.day_parts import day_windows, merge_parts  # noqa: E402
from analytics.facts import Window  # noqa: E402
from analytics.result_tables import create_result_tables  # noqa: E402
from analytics.settings import HealthRules  # noqa: E402
from gpulens.sim.fault_fleet import fault_fleet, known_faults  # noqa: E402
from gpulens.sim.fleet import SimulatedFleet  # noqa: E402


def _parts(con: duckdb.DuckDBPyConnection, window: Window, rules: HealthRules) -> list[str]:
    """The window's health day parts as ``analyze`` keeps them (one per UTC day, clipped to the window;
    a day seen whole by an earlier replay is reused), merged into ``an_health``."""
    ids = []
    for span in day_windows(window):
        pid = f"{span.start:%Y%m%dT%H%M}-{span.end:%Y%m%dT%H%M}"
        if con.execute("SELECT count(*) FROM part_health WHERE part_id = ?", [pid]).fetchone() == (0,):
            health.insert_part_health(con, pid, span, rules)
        ids.append(pid)
    merge_parts(con, ids)
    return ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=40)
    ap.add_argument("--days", type=float, default=5.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--step", type=float, default=300.0, help="sample step in seconds")
    ap.add_argument("--window-hours", type=int, default=48, help="trailing window of each replayed run")
    args = ap.parse_args()

    scenario = fault_fleet(args.nodes, args.days, args.seed)
    fleet = SimulatedFleet(scenario)
    epoch = scenario.epoch_seconds
    t0 = time.perf_counter()
    hist = fleet.history(epoch, epoch + args.days * 86400, args.step)
    sim_s = time.perf_counter() - t0
    con = duckdb.connect()
    gpu_samples, events, gpus = hist.gpu_samples, hist.events, hist.gpus  # noqa: F841 - read by DuckDB
    con.execute("CREATE TABLE f_gpu_samples AS SELECT * FROM gpu_samples")
    con.execute("CREATE TABLE f_events AS SELECT * FROM events")
    con.execute("CREATE TABLE an_dev AS SELECT gpu_uuid, node FROM gpus")
    create_result_tables(con)
    uuid = {(r["node"], r["gpu_index"]): r["gpu_uuid"] for r in gpus.iter_rows(named=True)}

    truth = known_faults(scenario)
    failing = {uuid[(k.node, k.gpu)]: k for k in truth if k.failure_rel is not None}
    lookalikes = {uuid[(k.node, k.gpu)]: k for k in truth if k.kind == "lookalike"}
    rules = HealthRules()
    start = datetime.fromtimestamp(epoch, UTC).replace(tzinfo=None)
    first_flag: dict[str, datetime] = {}
    flagged_by: dict[str, str] = {}
    runs = 0
    t1 = time.perf_counter()
    cutoff = start + timedelta(hours=24)
    end = start + timedelta(days=args.days)
    while cutoff <= end:
        window = Window(max(start, cutoff - timedelta(hours=args.window_hours)), cutoff, 300)
        for g in health.assess(con, window, rules, _parts(con, window, rules)).flagged:  # the quiet GPUs: ok
            k = failing.get(g.gpu_uuid)
            if k is not None and cutoff > start + timedelta(seconds=k.failure_rel):  # failed: known, not predicted
                continue
            if g.drain_candidate and g.gpu_uuid not in first_flag:
                first_flag[g.gpu_uuid] = cutoff
                flagged_by[g.gpu_uuid] = ",".join(sorted({e.signal for e in g.evidence if e.severity in ("watch", "drain")}))
        runs += 1
        cutoff += timedelta(hours=1)
    replay_s = time.perf_counter() - t1

    caught = {g: k for g, k in failing.items() if g in first_flag}
    false_alarms = [g for g in first_flag if g not in failing]
    leads = [
        (start + timedelta(seconds=k.failure_rel or 0) - first_flag[g]).total_seconds() / 3600 for g, k in caught.items()
    ]
    by_precursor: Counter[str] = Counter(k.precursor or "sudden" for k in failing.values())
    caught_by: Counter[str] = Counter(k.precursor or "sudden" for k in caught.values())
    precision = len(caught) / len(first_flag) if first_flag else 0.0
    recall = len(caught) / len(failing) if failing else 0.0
    print(f"fleet: {scenario.name}: {len(gpus)} GPUs, {args.days:g} days at {args.step:g} s "
          f"({gpu_samples.height} GPU samples, {events.height} events), simulated in {sim_s:.1f} s")
    print(f"faults: {len(failing)} failing ({dict(by_precursor)}), {len(lookalikes)} healthy look-alikes")
    print(f"replay: {runs} hourly runs over a {args.window_hours} h window in {replay_s:.1f} s "
          f"({replay_s / max(runs, 1) * 1000:.0f} ms per run)")
    print("caught / failing by precursor: " + ", ".join(f"{p} {caught_by[p]}/{n}" for p, n in sorted(by_precursor.items())))
    print(f"false alarms: {len(false_alarms)} ({sum(g in lookalikes for g in false_alarms)} on look-alikes)")
    for g in false_alarms:
        k = lookalikes.get(g)
        what = f"look-alike {k.precursor} at {k.onset_rel / 3600:.1f} h" if k else "healthy GPU"
        print(f"  false alarm: {g} ({what}) at {first_flag[g]:%Y-%m-%d %H:%M} by {flagged_by[g]}")
    if leads:
        print(f"lead hours: min {min(leads):.1f}, median {statistics.median(leads):.1f}, max {max(leads):.1f}")
    print(json.dumps({
        "gpus": len(gpus), "days": args.days, "seed": args.seed, "failing": len(failing),
        "lookalikes": len(lookalikes), "flagged": len(first_flag), "caught": len(caught),
        "false_alarms": len(false_alarms), "precision": round(precision, 3), "recall": round(recall, 3),
        "median_lead_hours": round(statistics.median(leads), 2) if leads else None,
        "min_lead_hours": round(min(leads), 2) if leads else None, "runs": runs,
        "replay_seconds": round(replay_s, 1),
    }))


if __name__ == "__main__":
    main()
