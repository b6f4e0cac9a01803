"""The cost of analysing a GPU-day from 1,000 to 1,000,000 GPUs: a Markdown table and an SVG plot.

Reads the JSON last lines of ``bench_analytics.py`` (single-node ``analyze`` per fleet size) and of
``bench_fleet_split.py`` (one day split over worker processes by node ranges, and its merge), and writes
the table to stdout and the plot (log-log: CPU milliseconds per GPU-day against GPUs) to ``--svg``.

    .venv/bin/python benchmarks/plot_gpu_day_cost.py --analytics a.json --split s1.json --split s2.json \\
        --svg docs/gpu-day-cost.svg
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Point:
    """One measured run: GPUs, GPU-days, CPU and wall seconds, peak RSS (GiB), how it ran."""

    gpus: int
    gpu_days: float
    cpu: float
    wall: float
    rss_gib: float
    how: str

    @property
    def cpu_ms_per_gpu_day(self) -> float:
        return 1000 * self.cpu / self.gpu_days


def _last_json(path: Path) -> object:
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith(("{", "["))]
    return json.loads(lines[-1])


def points(analytics: list[Path], splits: list[Path]) -> list[Point]:
    out = []
    for path in analytics:
        for row in _last_json(path):  # type: ignore[attr-defined]
            days = row["samples"] / row["gpus"] / 1440
            a = row["analyze"]
            out.append(Point(row["gpus"], row["gpus"] * days, a["cpu"], a["seconds"], a["rss_gib"], "one node"))
    for path in splits:
        run = _last_json(path)
        assert isinstance(run, dict)
        steps = [*run["worker_runs"], run["merge"]]
        out.append(Point(run["gpus"], float(run["gpus"]), sum(s["cpu"] for s in steps), sum(s["seconds"] for s in steps),
                         max(s["rss_gib"] for s in steps), f"{run['workers']} workers + merge"))
    return sorted(out, key=lambda p: (p.gpus, p.how))


def table(found: list[Point]) -> str:
    rows = ["| GPUs | how | GPU-days | CPU s | wall s | largest peak RSS | CPU ms per GPU-day |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    rows += [f"| {p.gpus:,} | {p.how} | {p.gpu_days:,.0f} | {p.cpu:,.1f} | {p.wall:,.1f} | {p.rss_gib:.2f} GiB | "
             f"{p.cpu_ms_per_gpu_day:.2f} |" for p in found]
    return "\n".join(rows)


def svg(found: list[Point], width: int = 640, height: int = 360) -> str:
    """A log-log plot of CPU ms per GPU-day against GPUs (one series per way of running)."""
    left, right, top, bottom = 70, 20, 20, 50
    xs = [math.log10(p.gpus) for p in found]
    ys = [math.log10(p.cpu_ms_per_gpu_day) for p in found]
    x0, x1 = math.floor(min(xs)), math.ceil(max(xs))
    y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
    if y1 == y0:
        y1 += 1

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def py(y: float) -> float:
        return height - bottom - (y - y0) / (y1 - y0) * (height - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             'font-size="12">', f'<rect width="{width}" height="{height}" fill="white"/>']
    for e in range(x0, x1 + 1):
        parts.append(f'<line x1="{px(e):.1f}" y1="{top}" x2="{px(e):.1f}" y2="{height - bottom}" stroke="#ddd"/>')
        parts.append(f'<text x="{px(e):.1f}" y="{height - bottom + 18}" text-anchor="middle">{10 ** e:,}</text>')
    for e in range(y0, y1 + 1):
        parts.append(f'<line x1="{left}" y1="{py(e):.1f}" x2="{width - right}" y2="{py(e):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{py(e) + 4:.1f}" text-anchor="end">{10 ** e:g}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 12}" text-anchor="middle">GPUs (one day at 60 s)</text>')
    parts.append(f'<text x="16" y="{(top + height - bottom) / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 16 {(top + height - bottom) / 2})">CPU ms per GPU-day</text>')
    colours = {"one node": "#1f77b4"}
    for how in sorted({p.how for p in found}):
        series = [p for p in found if p.how == how]
        colour = colours.get(how, "#d62728")
        line = " ".join(f"{px(math.log10(p.gpus)):.1f},{py(math.log10(p.cpu_ms_per_gpu_day)):.1f}" for p in series)
        if len(series) > 1:
            parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for p in series:
            cx, cy = px(math.log10(p.gpus)), py(math.log10(p.cpu_ms_per_gpu_day))
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{colour}"/>')
            parts.append(f'<text x="{cx + 6:.1f}" y="{cy - 6:.1f}" fill="{colour}">{p.cpu_ms_per_gpu_day:.1f} ({how})</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--analytics", type=Path, action="append", default=[], help="a bench_analytics.py output")
    ap.add_argument("--split", type=Path, action="append", default=[], help="a bench_fleet_split.py output")
    ap.add_argument("--svg", type=Path, required=True, help="where the plot is written")
    args = ap.parse_args()
    found = points(args.analytics, args.split)
    if not found:
        ap.error("no measured run in the files given")
    print(table(found))
    args.svg.write_text(svg(found), encoding="utf-8")
    print(f"\nplot: {args.svg}")


if __name__ == "__main__":
    main()
