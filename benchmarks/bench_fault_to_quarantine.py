"""Seconds from a GPU fault's first sample to its quarantine write, with the real Prometheus and Alertmanager.

Two faults at once on a small fleet (tests/support/fault_quarantine.py): a GPU that falls off the bus
(XID 79, the hard-fault alert GpuDrainClassXid) and a GPU that repeats a reset-class XID (the early
warning GpuResetClassXidsRepeating). Prometheus scrapes every ``--scrape`` and evaluates the rules of
deploy/prometheus/gpulens-rules.yaml unchanged at the same interval; Alertmanager waits ``--group-wait``
(the shipped AlertmanagerConfig's value by default) before the first notification of a group; the
remediation service (``--apply``) writes to the FakeKubernetesApi. The goal: a hard fault quarantined
within 60 s of its first sample at a 15 s scrape interval.

Run: ``.venv/bin/python benchmarks/bench_fault_to_quarantine.py [--scrape 15] [--group-wait 5s] [--runs 1]``
The last line of the output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.fault_quarantine import fault_to_quarantine  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrape", type=float, default=15.0, help="scrape and rule evaluation interval, seconds")
    parser.add_argument("--group-wait", default="5s", help="Alertmanager group_wait")
    parser.add_argument("--group-interval", default="1m", help="Alertmanager group_interval")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    hard, warn = [], []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="gpulens-fault-") as tmp:
            t = fault_to_quarantine(Path(tmp), scrape_seconds=args.scrape, group_wait=args.group_wait,
                                    group_interval=args.group_interval, timeout=max(120.0, 10 * args.scrape))
        hard.append(t.seconds_to_quarantine_hard)
        warn.append(t.seconds_to_quarantine_warn)
        print(f"run {i + 1}: hard fault {t.seconds_to_quarantine_hard:.1f} s, precursor "
              f"{t.seconds_to_quarantine_warn:.1f} s", file=sys.stderr)
    print(json.dumps({
        "seconds_to_quarantine_hard": round(max(hard), 2), "seconds_to_quarantine_warn": round(max(warn), 2),
        "seconds_to_quarantine_hard_median": round(statistics.median(hard), 2),
        "seconds_to_quarantine_warn_median": round(statistics.median(warn), 2),
        "scrape_interval_seconds": args.scrape, "rule_evaluation_interval_seconds": args.scrape,
        "alertmanager_group_wait": args.group_wait, "runs": args.runs,
        "hard_alert": "GpuDrainClassXid", "warn_alert": "GpuResetClassXidsRepeating",
        "goal_hard_seconds": 60, "goal_met": max(hard) <= 60,
    }))


if __name__ == "__main__":
    main()
