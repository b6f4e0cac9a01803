"""What the gpulens recording rules cost a real Prometheus, and what they save the dashboards.

A synthetic fleet (default 250 nodes x 8 GPUs; a quarter of the nodes in MIG mode with seven 1g
instances per GPU; 40 tenants holding about 70% of the devices) is served as one static exposition
and scraped by the real ``prometheus`` every ``--interval`` with deploy/prometheus/gpulens-rules.yaml
loaded (group intervals set to the same interval). Measured in the same run:

* rule evaluation: median ``prometheus_rule_group_last_duration_seconds`` of each group;
* dashboard queries: the raw aggregation a panel would need without the rules vs the recorded series
  it reads, as instant queries and as range queries over the scraped window (median of ``--repeat``).

Run: ``.venv/bin/python benchmarks/bench_rules_queries.py [--nodes 250] [--seconds 120] [--interval 15s]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.prometheus import PrometheusServer, running_prometheus  # noqa: E402

RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "gpulens-rules.yaml"
MODELS = ("H100", "H200", "A100")
PAIRS = (  # (dashboard panel, raw query, recorded query)
    ("tenant allocated GE", "sum by (tenant) (gpulens_allocation_gpu_equivalents)",
     "tenant:gpulens_allocation_gpu_equivalents:sum"),
    ("tenant idle GE",
     "clamp_min(sum by (tenant) (gpulens_allocation_gpu_equivalents) - sum by (tenant) "
     "(gpulens_tenant_active_gpu_equivalents) - sum by (tenant) (gpulens_tenant_unmeasured_gpu_equivalents), 0)",
     "tenant:gpulens_idle_gpu_equivalents:sum"),
    ("allocated GE by model",
     "sum by (model) (gpulens_allocation_gpu_equivalents * on (node, gpu) group_left (model) gpulens_gpu_info)",
     "model:gpulens_allocation_gpu_equivalents:sum"),
    ("fleet capacity", "sum(gpulens_device_gpu_equivalents)", "cluster:gpulens_device_gpu_equivalents:sum"),
)


def exposition(nodes: int, tenants: int = 40) -> bytes:
    """Prometheus text of a synthetic fleet with the label sets of docs/metrics.md."""
    lines: list[str] = []
    held: dict[tuple[str, str, str], float] = {}
    counter = 0
    for n in range(nodes):
        node = f"node-{n:04d}"
        mig = n % 4 == 0
        model = MODELS[n % 3]
        for g in range(8):
            gpu = f"GPU-{n:04d}-{g}"
            mode = "mig" if mig else "exclusive"
            lines.append(f'gpulens_gpu_info{{node="{node}",gpu="{gpu}",index="{g}",model="{model}",'
                         f'sharing_mode="{mode}",driver_version="570.86"}} 1')
            lines.append(f'gpulens_gpu_up{{node="{node}",gpu="{gpu}"}} 1')
            lines.append(f'gpulens_gpu_power_watts{{node="{node}",gpu="{gpu}"}} {300 + g}')
            devices = [(f"MIG-{n:04d}-{g}-{i}", "1g.18gb", str(7 + i), 1 / 7) for i in range(7)] if mig \
                else [(gpu, "gpu", "", 1.0)]
            for device, profile, gi, share in devices:
                lines.append(f'gpulens_device_gpu_equivalents{{node="{node}",gpu="{gpu}",device="{device}",'
                             f'model="{model}",profile="{profile}",gpu_instance="{gi}",compute_instance="0",'
                             f'sharing_mode="{mode}"}} {share}')
                for metric, value in (("used", 40e9), ("total", 80e9)):
                    lines.append(f'gpulens_device_memory_{metric}_bytes{{node="{node}",gpu="{gpu}",'
                                 f'device="{device}",profile="{profile}",gpu_instance="{gi}"}} {value}')
                lines.append(f'gpulens_device_activity_ratio{{node="{node}",gpu="{gpu}",device="{device}",'
                             f'profile="{profile}",gpu_instance="{gi}",compute_instance="0"}} 0.4')
                counter += 1
                if counter % 10 < 7:
                    tenant = f"team-{counter % tenants:02d}"
                    lines.append(
                        f'gpulens_allocation_gpu_equivalents{{node="{node}",gpu="{gpu}",device="{device}",'
                        f'profile="{profile}",namespace="{tenant}",pod="job-{counter}",container="main",'
                        f'tenant="{tenant}",sharing_mode="{mode}",workload_kind="Job",workload="job-{counter}"}} {share}'
                    )
                    key = (node, tenant, profile)
                    held[key] = held.get(key, 0.0) + share
    for (node, tenant, profile), share in held.items():
        labels = f'node="{node}",tenant="{tenant}",profile="{profile}"'
        lines.append(f"gpulens_tenant_allocated_gpu_equivalents{{{labels}}} {share}")
        lines.append(f"gpulens_tenant_active_gpu_equivalents{{{labels}}} {0.4 * share}")
        lines.append(f"gpulens_tenant_unmeasured_gpu_equivalents{{{labels}}} 0")
        lines.append(f"gpulens_tenant_devices{{{labels}}} 1")
    return ("\n".join(lines) + "\n").encode()


def serve(body: bytes) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server naming
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def timed_query(server: PrometheusServer, path: str, repeat: int, **params: str) -> float:
    """Median wall time of a query through the HTTP API (a long timeout: the machine may be loaded)."""
    url = f"{server.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=300) as response:  # noqa: S310 - loopback
            payload = json.loads(response.read())
        samples.append(time.perf_counter() - t0)
        assert payload["status"] == "success", payload
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=250)
    parser.add_argument("--seconds", type=float, default=120.0, help="how long to scrape and evaluate")
    parser.add_argument("--interval", default="15s")
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()

    interval_seconds = float(args.interval.removesuffix("s"))
    body = exposition(args.nodes)
    series = body.count(b"\n")
    http = serve(body)
    target = f"127.0.0.1:{http.server_address[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
        for group in rules["groups"]:
            group["interval"] = args.interval
        rules_file = Path(tmp) / "rules.yaml"
        rules_file.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
        config = {
            "global": {"scrape_interval": args.interval, "evaluation_interval": args.interval},
            "scrape_configs": [
                {"job_name": "gpulens-exporter", "honor_labels": True, "scrape_timeout": args.interval,
                 "static_configs": [{"targets": [target]}]},
            ],
        }
        with running_prometheus(data_dir=Path(tmp) / "prom", config=config, rule_files=[rules_file]) as prom:
            start = time.time()
            evaluations: dict[str, list[float]] = {}
            while time.time() - start < args.seconds:
                time.sleep(interval_seconds)
                for group in prom.api("rules")["groups"]:
                    if group.get("lastEvaluation", "").startswith("0001"):
                        continue  # not evaluated yet
                    evaluations.setdefault(group["name"], []).append(float(group["evaluationTime"]))
            end = time.time()
            durations = {name: statistics.median(values) for name, values in evaluations.items()}
            print(f"fleet: {args.nodes} nodes, {args.nodes * 8} GPUs, {series} series in one exposition; "
                  f"scrape and rule interval {args.interval}; {args.seconds:.0f} s of data")
            print(f"\nrule group evaluation (median of /api/v1/rules evaluationTime, sampled every {args.interval}):")
            for group, seconds in sorted(durations.items()):
                print(f"  {group:28s} {1000 * seconds:8.2f} ms")
            print(f"  {'all groups':28s} {1000 * sum(durations.values()):8.2f} ms per evaluation")
            print(f"\ndashboard queries, median of {args.repeat} (raw aggregation vs recorded series):")
            window = {"start": f"{start + 2 * interval_seconds:.0f}", "end": f"{end:.0f}", "step": args.interval.removesuffix("s")}
            for name, raw, recorded in PAIRS:
                for kind, path, params in (("instant", "query", {}), ("range", "query_range", window)):
                    t_raw = timed_query(prom, path, args.repeat, query=raw, **params)
                    t_rec = timed_query(prom, path, args.repeat, query=recorded, **params)
                    print(f"  {name:24s} {kind:8s} raw {1000 * t_raw:8.2f} ms   recorded {1000 * t_rec:7.2f} ms"
                          f"   raw/recorded {t_raw / t_rec:6.1f}x")
    http.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
