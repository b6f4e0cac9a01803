"""Simulated history: ``SimulatedFleet.history()`` (one vectorized evaluation per node over all times)
against the obvious baseline (one ``node_snapshot`` per node per timestamp, turned into rows), on the
built-in default fleet (6 nodes, 48 GPUs, 108 devices).

Both build the same sample rows for the same window (checked); then history alone runs for the long
window (14 days at 60 s by default). Last, the cold start of a live exporter far from the scenario's
epoch: a fresh fleet's first snapshot of every node ``--cold-days`` after the epoch (the energy counter
integrates every minute's power since the epoch once, then reads its per-day cache), and the next one.
Peak RSS is per child process.

    .venv/bin/python benchmarks/bench_sim_history.py                 # 2 h side by side, 14 days, cold at 334 days
    .venv/bin/python benchmarks/bench_sim_history.py --side-hours 1 --days 3 --cold-days 30
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DAY = 86400.0


def _start() -> float:
    from gpulens.sim.scenario_file import load_scenario

    return load_scenario(None).epoch_seconds + 300 * DAY


def _history(seconds: float, step: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    from gpulens.sim.fleet import SimulatedFleet
    from gpulens.sim.scenario_file import load_scenario

    fleet = SimulatedFleet(load_scenario(None))
    start = _start()
    fleet.history(start, start + 600, step)  # warm imports and caches
    t0, c0 = time.perf_counter(), time.process_time()
    h = fleet.history(start, start + seconds, step)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    rows = sum(f.height for f in h.frames().values())
    samples = h.device_samples.height + h.gpu_samples.height + h.allocations.height
    out.put({"wall": wall, "cpu": cpu, "rows": rows, "samples": samples,
             "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def _snapshots(seconds: float, step: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    from gpulens.sim.fleet import SimulatedFleet
    from gpulens.sim.history import sample_times, snapshot_rows
    from gpulens.sim.scenario_file import load_scenario

    fleet = SimulatedFleet(load_scenario(None))
    start = _start()
    for node in fleet.node_names():  # warm imports and caches (the cold start is measured on its own)
        fleet.node_snapshot(node, start)
    t0, c0 = time.perf_counter(), time.process_time()
    samples = 0
    for t in sample_times(start, start + seconds, step):
        for node in fleet.node_names():
            rows = snapshot_rows(fleet.node_snapshot(node, float(t)))
            samples += sum(len(r) for r in rows.values())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out.put({"wall": wall, "cpu": cpu, "rows": samples, "samples": samples,
             "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def _cold(days: float, step: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    from gpulens.sim.fleet import SimulatedFleet
    from gpulens.sim.scenario_file import load_scenario

    fleet = SimulatedFleet(load_scenario(None))
    t = fleet.scenario.epoch_seconds + days * DAY + 17.5
    times = []
    for at in (t, t + step):
        t0, c0 = time.perf_counter(), time.process_time()
        for node in fleet.node_names():
            fleet.node_snapshot(node, at)
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    out.put({"first_wall": times[0][0], "first_cpu": times[0][1], "next_wall": times[1][0], "next_cpu": times[1][1],
             "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def _run(target, seconds: float, step: float) -> dict[str, float]:  # type: ignore[no-untyped-def]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(seconds, step, q))
    p.start()
    result = q.get()
    p.join()
    return result  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--side-hours", type=float, default=2.0, help="window of the side-by-side run")
    ap.add_argument("--days", type=float, default=14.0, help="window of the history-only run")
    ap.add_argument("--step", type=float, default=60.0)
    ap.add_argument("--cold-days", type=float, default=334.0, help="days after the epoch of the cold-start reads")
    args = ap.parse_args()
    side = args.side_hours * 3600
    vec = _run(_history, side, args.step)
    base = _run(_snapshots, side, args.step)
    assert vec["samples"] == base["samples"], (vec, base)
    print(f"side by side, {args.side_hours:g} h at {args.step:g} s, default fleet ({vec['samples']:,} sample rows)")
    print(f"  {'':28} {'wall s':>8} {'cpu s':>8} {'rows/s':>12} {'peak RSS MiB':>13}")
    for name, r in (("history() (vectorized)", vec), ("node_snapshot per timestamp", base)):
        print(f"  {name:28} {r['wall']:8.2f} {r['cpu']:8.2f} {r['samples'] / r['wall']:12,.0f} {r['rss_mib']:13.0f}")
    print(f"  speed-up (wall): {base['wall'] / vec['wall']:.0f}x")
    long = _run(_history, args.days * DAY, args.step)
    print(f"history() {args.days:g} days at {args.step:g} s: {long['wall']:.2f} s wall, {long['cpu']:.2f} s CPU, "
          f"{long['rows']:,} rows in all frames, peak RSS {long['rss_mib']:.0f} MiB")
    cold = _run(_cold, args.cold_days, args.step)
    print(f"cold start {args.cold_days:g} days after the epoch, one snapshot of each node: first "
          f"{cold['first_wall']:.2f} s wall, {cold['first_cpu']:.2f} s CPU; next {cold['next_wall'] * 1000:.0f} ms wall, "
          f"{cold['next_cpu'] * 1000:.0f} ms CPU; peak RSS {cold['rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
