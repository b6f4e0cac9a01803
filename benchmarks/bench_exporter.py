"""Exporter serving cost: /metrics latency, CPU per collection cycle and RSS, vs the common pattern.

Node: the default scenario's first node (8 H200 in MIG mode, 56 MIG instances) at a fixed virtual time,
with 60 pods (each MIG device held by one pod, four of them time-sliced between two pods).

* gpulens: ``CollectionCycle`` + ``SnapshotCollector`` + ``ExpositionCache`` behind ``ExporterHTTPServer``
  (the exposition is rendered once per cycle; every scrape gets the same bytes).
* baseline: the common pattern: module-level ``Gauge`` objects with labels, updated by a loop every
  cycle, served by prometheus_client's ``start_http_server`` (renders on every scrape; keeps stale series).

Each exporter runs in its own process (RSS is its own) with the snapshot handed over ready-made, so
the figures are the serving side's cost, not the simulator's or NVML's. The load generator runs in this
process over real HTTP like Prometheus: its ``Accept`` header (OpenMetrics), gzip, a kept-alive connection per scraper
(the baseline's server closes it after each scrape, so its scrapers reconnect, as Prometheus would).

Run: ``.venv/bin/python benchmarks/bench_exporter.py [--requests 400] [--cycles 30]``
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpulens.core.device_model import Allocation, DeviceReadings, SharingMode  # noqa: E402

BENCH_POD_COUNT = 60


def bench_readings() -> tuple[DeviceReadings, tuple[Allocation, ...]]:
    """8 H200 MIG GPUs (56 instances) from the simulator's default node, and 60 pods over them."""
    from gpulens.sim.fleet import SimulatedFleet
    from gpulens.sim.scenario_file import load_scenario

    fleet = SimulatedFleet(load_scenario(None))
    node = fleet.node_names()[0]
    snap = fleet.node_snapshot(node, fleet.scenario.epoch_seconds + 2.5 * 86_400)
    migs = [m for g in snap.gpus for m in g.mig_instances]
    assert len(snap.gpus) == 8 and len(migs) == 56, (len(snap.gpus), len(migs))
    tenants = sorted({a.tenant for a in snap.allocations}) or ["team-a"]
    allocations = []
    for i in range(BENCH_POD_COUNT):
        mig = migs[i % len(migs)]
        shared = i >= len(migs) or i < BENCH_POD_COUNT - len(migs)
        tenant = tenants[i % len(tenants)]
        allocations.append(Allocation(
            device_id=mig.uuid, namespace=tenant, pod=f"bench-{i:03d}-7f9c", container="main", tenant=tenant,
            sharing_mode=SharingMode.TIME_SLICING if shared else SharingMode.MIG,
            gpu_equivalents=mig.gpu_equivalents / (2 if shared else 1), replica=(i // len(migs)) if shared else None,
            workload_kind="Deployment", workload_name=f"bench-{i:03d}",
        ))
    readings = DeviceReadings(node=node, timestamp=snap.timestamp, gpus=snap.gpus, processes=snap.processes)
    return readings, tuple(allocations)


class FixedSource:
    """Both sources over a fixed reading (the benchmark measures serving, not the device read)."""

    def __init__(self, readings: DeviceReadings, allocations: tuple[Allocation, ...]) -> None:
        self.readings, self.allocations = readings, allocations

    def read_devices(self, now: float) -> DeviceReadings:
        return replace(self.readings, timestamp=now)

    def read_allocations(self, now: float) -> tuple[Allocation, ...]:
        return self.allocations

    def close(self) -> None:
        pass


def rss_mib() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MiB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def cpu_per_cycle(run_cycle: Callable[[], object], cycles: int) -> float:
    run_cycle()  # warm-up
    samples = []
    for _ in range(cycles):
        t0 = time.process_time()
        run_cycle()
        samples.append(time.process_time() - t0)
    return statistics.median(samples)


def serve_gpulens(conn: Connection, readings: DeviceReadings, allocations: tuple[Allocation, ...],
                  cycles: int) -> None:
    from exporter.cycle import CollectionCycle
    from exporter.server import build_server
    from exporter.settings import ExporterSettings

    source = FixedSource(readings, allocations)
    cycle = CollectionCycle(source, source, node=readings.node)
    server = build_server(cycle, ExporterSettings(listen="127.0.0.1:0", max_concurrent_requests=64), backend="sim")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cycle.run_once()
    server.cache.render(openmetrics=True, gzipped=True)  # a first scrape: the format Prometheus asks for
    cpu = cpu_per_cycle(cycle.run_once, cycles)  # collection + pre-render of the asked formats
    conn.send((server.port, cpu))
    conn.recv()  # load done
    conn.send(rss_mib())
    server.shutdown()


def serve_baseline(conn: Connection, readings: DeviceReadings, allocations: tuple[Allocation, ...],
                   cycles: int) -> None:
    from prometheus_client import CollectorRegistry, Gauge, start_http_server

    from exporter.cycle import ExporterState
    from exporter.exposition import state_families
    from gpulens.core.device_model import NodeSnapshot

    registry = CollectorRegistry(auto_describe=False)
    gauges: dict[str, Gauge] = {}  # module-level Gauges in the usual exporter; created once, updated in place
    source = FixedSource(readings, allocations)

    def update() -> None:
        now = time.time()
        r = source.read_devices(now)
        snap = NodeSnapshot(node=r.node, timestamp=now, gpus=r.gpus, allocations=source.read_allocations(now),
                            processes=r.processes)
        state = ExporterState(node=r.node, snapshot=snap, cycles_total=1, errors_total={"devices": 0})
        for family in state_families(state, "sim", "0.1.0"):  # the same values, set through labelled Gauges
            for sample in family.samples:
                gauge = gauges.get(sample.name)
                if gauge is None:
                    gauge = gauges[sample.name] = Gauge(sample.name, family.documentation,
                                                        list(sample.labels), registry=registry)
                gauge.labels(**sample.labels).set(sample.value)

    cpu = cpu_per_cycle(update, cycles)
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    conn.send((server.server_port, cpu))
    conn.recv()
    conn.send(rss_mib())
    server.shutdown()


HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}
"""What Prometheus 2.x sends: OpenMetrics preferred, gzip accepted (the body is read compressed)."""


def scrape(port: int, total: int, concurrency: int) -> tuple[list[float], int]:
    """Latencies of ``total`` scrapes made by ``concurrency`` threads, and the body size.

    Each scraper keeps its HTTP/1.1 connection alive between scrapes, as Prometheus does; a server that
    closes connections (the baseline's) costs a reconnect per scrape, as it would for Prometheus.
    """
    latencies: list[float] = []
    sizes: list[int] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        local = []
        size = 0
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(n):
            t0 = time.perf_counter()
            conn.request("GET", "/metrics", headers=HEADERS)
            resp = conn.getresponse()
            size = len(resp.read())
            local.append(time.perf_counter() - t0)
            assert resp.status == 200, resp.status
        conn.close()
        with lock:
            latencies.extend(local)
            sizes.append(size)

    threads = [threading.Thread(target=worker, args=(total // concurrency,)) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, max(sizes)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(kind: str, target: Callable[..., None], readings: DeviceReadings, allocations: tuple[Allocation, ...],
            requests: int, cycles: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(child, readings, allocations, cycles), name=kind)
    proc.start()
    port, cpu = parent.recv()
    assert proc.pid is not None
    scrape(port, 20, 1)  # warm-up
    cpu0, t0 = process_cpu_seconds(proc.pid), time.perf_counter()
    one, size = scrape(port, requests // 2, 1)
    t1 = time.perf_counter()
    ten, _ = scrape(port, requests, 10)
    cpu2, t2 = process_cpu_seconds(proc.pid), time.perf_counter()
    parent.send("done")
    rss, peak = parent.recv()
    proc.join(30)
    return {
        "p50_1": pct(one, 0.5) * 1000, "p99_1": pct(one, 0.99) * 1000,
        "p50_10": pct(ten, 0.5) * 1000, "p99_10": pct(ten, 0.99) * 1000,
        "server_cpu_scrape_ms": (cpu2 - cpu0) / (requests // 2 + requests) * 1000,
        "throughput_10": requests / (t2 - t1), "throughput_1": (requests // 2) / (t1 - t0),
        "cpu_cycle_ms": cpu * 1000,
        "cpu_cycle_and_scrape_ms": cpu * 1000 + (cpu2 - cpu0) / (requests // 2 + requests) * 1000, "rss_mib": rss, "peak_rss_mib": peak, "bytes": float(size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="scrapes at 10 concurrent (half that at 1)")
    parser.add_argument("--cycles", type=int, default=30, help="collection cycles timed per exporter")
    args = parser.parse_args()
    readings, allocations = bench_readings()
    migs = sum(len(g.mig_instances) for g in readings.gpus)
    print(f"node {readings.node}: {len(readings.gpus)} GPUs, {migs} MIG instances, {len(allocations)} pods; "
          f"{args.requests // 2} scrapes at 1, {args.requests} at 10 concurrent; {args.cycles} cycles")
    ours = measure("gpulens", serve_gpulens, readings, allocations, args.requests, args.cycles)
    base = measure("baseline", serve_baseline, readings, allocations, args.requests, args.cycles)
    rows = [
        ("/metrics p50, 1 scraper (ms)", "p50_1"), ("/metrics p99, 1 scraper (ms)", "p99_1"),
        ("/metrics p50, 10 scrapers (ms)", "p50_10"), ("/metrics p99, 10 scrapers (ms)", "p99_10"),
        ("scrapes/s, 1 scraper", "throughput_1"), ("scrapes/s, 10 scrapers", "throughput_10"),
        ("exporter CPU per scrape (ms)", "server_cpu_scrape_ms"),
        ("CPU per collection cycle (ms)", "cpu_cycle_ms"),
        ("CPU per cycle + 1 scrape (ms)", "cpu_cycle_and_scrape_ms"), ("RSS after load (MiB)", "rss_mib"),
        ("peak RSS (MiB)", "peak_rss_mib"), ("gzipped exposition (bytes)", "bytes"),
    ]
    print(f"| {'measure':32} | {'gpulens':>10} | {'baseline':>10} | {'gpulens advantage':>18} |")
    print(f"| {'-' * 32} | {'-' * 10}: | {'-' * 10}: | {'-' * 18}: |")
    for label, key in rows:
        higher_is_better = key.startswith("throughput")
        num, den = (ours[key], base[key]) if higher_is_better else (base[key], ours[key])
        ratio = num / den if den else float("nan")
        print(f"| {label:32} | {ours[key]:10.2f} | {base[key]:10.2f} | {ratio:17.2f}x |")
    goals = (ours["p50_1"] < 5 and ours["p50_10"] < 5, ours["rss_mib"] < 80,
             ours["p50_1"] < base["p50_1"] and ours["p50_10"] < base["p50_10"])
    print("goals: p50 < 5 ms: {}; RSS < 80 MiB: {}; faster than baseline: {}".format(*("yes" if g else "NO" for g in goals)))


if __name__ == "__main__":
    main()
