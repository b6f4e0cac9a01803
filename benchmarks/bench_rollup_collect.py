"""Collecting one day from a real Prometheus: raw series at 60 s vs the 5-minute rollups, side by side.

One day of a synthetic fleet (``tests/support/synthetic_fleet``: per node one H200 in MIG mode with
three instances and ``--whole-gpus`` H100s, every reading random, scraped every minute 15 s past the
minute) is written as TSDB blocks with ``promtool tsdb create-blocks-from openmetrics``; the rollups
of ``deploy/prometheus/gpulens-rules.yaml`` (group ``gpulens.rollup.rules``) are recorded from it by
the real rule engine (``promtool tsdb create-blocks-from rules``), and one Prometheus serves both.
Then, into fresh stores, ``collect_range`` reads the day raw at 60 s and from rollups at 5 m (gpulens
naming): wall time, the seconds spent waiting for ``query_range`` answers (summed over the parallel
requests), rows written, and the ratios raw / rollups. The last line is JSON.

    .venv/bin/python benchmarks/bench_rollup_collect.py                  # 16 nodes (64 GPUs, 96 devices), 24 h
    .venv/bin/python benchmarks/bench_rollup_collect.py --nodes 4 --hours 6
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import polars as pl  # noqa: E402
import yaml  # noqa: E402

from collector.prometheus import HttpSettings, PrometheusClient, RangeSummary, collect_range  # noqa: E402
from collector.prometheus_rollups import ROLLUP_GROUP  # noqa: E402
from collector.store import Store  # noqa: E402
from tests.support.prometheus import promtool, running_prometheus  # noqa: E402
from tests.support.store_render import render_openmetrics, series_for  # noqa: E402
from tests.support.synthetic_fleet import synthetic_frames  # noqa: E402

RULES_FILE = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "gpulens-rules.yaml"


class TimedClient(PrometheusClient):
    """A client that adds up the seconds each ``query_range`` waits for its answer."""

    waited = 0.0

    def query_range(self, query: str, start: float, end: float, step: float, metric: str = "") -> pl.DataFrame:
        t0 = time.perf_counter()
        try:
            return super().query_range(query, start, end, step, metric)
        finally:
            self.waited += time.perf_counter() - t0


def _run(url: str, db: Path, start: float, end: float, *, rollups: bool) -> tuple[RangeSummary, float, float, int]:
    with Store(str(db)) as store, TimedClient(HttpSettings(url, timeout=120)) as client:
        t0 = time.perf_counter()
        summary = collect_range(store, client, start=start, end=end, step=300.0 if rollups else 60.0,
                                schema="gpulens", rollups=rollups)
        wall = time.perf_counter() - t0
        samples = store.count("device_samples")
        return summary, wall, client.waited, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--whole-gpus", type=int, default=3, help="H100s per node besides the MIG H200")
    parser.add_argument("--hours", type=float, default=24.0)
    args = parser.parse_args()
    end = (time.time() // 3600) * 3600 - 3 * 3600
    start = end - args.hours * 3600
    with tempfile.TemporaryDirectory(prefix="bench-rollups-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        frames = synthetic_frames(start - 600 + 15, end + 600 + 15, 60, nodes=args.nodes, whole_gpus=args.whole_gpus)
        text = render_openmetrics(series_for(frames, "gpulens"))
        (tmp / "raw.om").write_text(text, encoding="utf-8")
        del text
        code, out = promtool("tsdb", "create-blocks-from", "openmetrics", str(tmp / "raw.om"), str(tmp / "raw"),
                             timeout=900)
        assert code == 0, out
        groups = yaml.safe_load(RULES_FILE.read_text(encoding="utf-8"))["groups"]
        rules = tmp / "rollup-rules.yaml"
        rules.write_text(yaml.safe_dump({"groups": [g for g in groups if g["name"] == ROLLUP_GROUP]}), encoding="utf-8")
        prom_args = ["--storage.tsdb.retention.time=100y", "--query.max-samples=200000000"]
        with running_prometheus(data_dir=tmp / "p1", storage_path=tmp / "raw", extra_args=prom_args) as prom:
            t1 = time.perf_counter()
            code, out = promtool("tsdb", "create-blocks-from", "rules", f"--start={start:.0f}",
                                 f"--end={end + 300:.0f}", f"--url={prom.url}", f"--output-dir={tmp / 'rules'}",
                                 str(rules), timeout=900)
            assert code == 0, out
            record_s = time.perf_counter() - t1
        for block in (tmp / "rules").iterdir():
            shutil.copytree(block, tmp / "raw" / block.name)
        setup_s = time.perf_counter() - t0
        devices, gpus = frames["devices"].height, frames["gpus"].height
        print(f"fleet: {args.nodes} nodes, {gpus} GPUs, {devices} devices, {args.hours:g} h; blocks and rollups "
              f"built in {setup_s:.1f} s (rule backfill {record_s:.1f} s)", flush=True)
        results = {}
        with running_prometheus(data_dir=tmp / "p2", storage_path=tmp / "raw", extra_args=prom_args) as prom:
            for name, rollups in (("raw_60s", False), ("rollups_5m", True)):
                summary, wall, waited, samples = _run(prom.url, tmp / f"{name}.duckdb", start, end, rollups=rollups)
                results[name] = {"collect_s": round(wall, 2), "query_wait_s": round(waited, 2),
                                 "rows": summary.rows, "device_samples": samples}
        raw, roll = results["raw_60s"], results["rollups_5m"]
        print(f"{'':12} {'collect s':>10} {'query wait s':>13} {'rows':>10} {'device rows':>12}")
        for name, r in results.items():
            print(f"{name:12} {r['collect_s']:>10.2f} {r['query_wait_s']:>13.2f} {r['rows']:>10} {r['device_samples']:>12}")
        ratios = {
            "collect": round(raw["collect_s"] / roll["collect_s"], 2),
            "query_wait": round(raw["query_wait_s"] / roll["query_wait_s"], 2),
            "rows": round(raw["rows"] / roll["rows"], 2),
        }
        print(f"raw / rollups: collect {ratios['collect']}x, query wait {ratios['query_wait']}x, rows {ratios['rows']}x")
        print(json.dumps({"gpus": gpus, "devices": devices, "hours": args.hours, **results, "ratio": ratios}))


if __name__ == "__main__":
    main()
