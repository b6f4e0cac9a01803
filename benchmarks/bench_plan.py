"""Fleet quota plan at scale: Q queues x F flavors decided by ``plan_pools``, against a unit-by-unit baseline.

Synthetic input (seeded): every queue holds an entry in every flavor (nvidia.com/gpu), with bursty
asks, a fifth of the queues with pending work, a tenth with guarantees, weights 1-4 and tenant budgets
on a third of the tenants; each flavor's capacity is its queues' floors (holds, one-step cuts) + the n+1
reserve of 8 + a tenth of the summed asks, so capacity binds and no pool conflicts. Per size, in one process: the baseline (the same divisor method, but one heap pop per
unit of capacity, as a naive water-filling does), the water-filling of one pool (``water_fill``), and
the whole plan (``plan_pools``: bounds, budgets, target, next apply, relaxations, explanations).

    .venv/bin/python benchmarks/bench_plan.py                      # 1000x20 (the issue's target: < 5 s)
    .venv/bin/python benchmarks/bench_plan.py --sizes 100x5,1000x20,4000x20
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analytics.plan.fleet import plan_pools  # noqa: E402
from analytics.plan.model import PoolCapacity, QueueDemand  # noqa: E402
from analytics.plan.policy import PlanPolicy, QueuePolicy, TenantPolicy  # noqa: E402
from analytics.plan.waterfill import Claim, water_fill  # noqa: E402

GPU = "nvidia.com/gpu"


def synthetic(queues: int, flavors: int, seed: int = 7) -> tuple[dict, list[QueueDemand], PlanPolicy]:
    rnd = random.Random(seed)
    demands, asks = [], {f"f{j:02d}": 0 for j in range(flavors)}
    floors = dict.fromkeys(asks, 0)
    for i in range(queues):
        for flavor in asks:
            current = rnd.choice([0, 2, 4, 8, 8, 16, 32])
            ask = max(0, int(current * rnd.uniform(0.3, 1.8)) + (rnd.random() < 0.05) * 24)
            pending = rnd.choice([0, 0, 0, 0, 4])
            asks[flavor] += ask
            floors[flavor] += current if pending else max(2 if i % 10 == 0 else 0, current - max(1, current // 4))
            demands.append(QueueDemand(f"q{i:04d}", f"t{i % 50:02d}", flavor, GPU, current, ask,
                                       demand_p95=ask / 1.15, in_use=min(current, ask), pending_now=pending,
                                       pending_share=0.2 if pending else 0.0, evidence_days=30))
    pools = {(f, GPU): PoolCapacity(f, GPU, floors[f] + 8 + a // 10, nodes=max(2, a // 8), largest_node=8,
                                    unit_price_month=2000.0) for f, a in asks.items()}
    policy = PlanPolicy(
        queues={f"q{i:04d}": QueuePolicy(weight=1 + i % 4, guarantee=2 if i % 10 == 0 else 0) for i in range(queues)},
        tenants={f"t{t:02d}": TenantPolicy(monthly_budget_usd=12_000.0 * queues) for t in range(0, 50, 3)},
    )
    return pools, demands, policy


def unit_by_unit(claims: list[Claim], capacity: int) -> list[int]:
    """Baseline: the same divisor method, one heap operation per unit of capacity."""
    x = [c.lo for c in claims]
    heap = [((x[i] + 1) / c.weight, c.key, i) for i, c in enumerate(claims) if x[i] < c.hi]
    heapq.heapify(heap)
    left = capacity - sum(x)
    while left > 0 and heap:
        _, key, i = heapq.heappop(heap)
        x[i] += 1
        left -= 1
        if x[i] < claims[i].hi:
            heapq.heappush(heap, ((x[i] + 1) / claims[i].weight, key, i))
    return x


def run(queues: int, flavors: int) -> None:
    pools, demands, policy = synthetic(queues, flavors)
    flavor = next(iter(pools))
    claims = [Claim(d.queue, 0, d.demand or 0, policy.queue(d.queue).weight) for d in demands if d.flavor == flavor[0]]
    capacity = pools[flavor].capacity
    t0 = time.perf_counter()
    base = [unit_by_unit(claims, capacity) for _ in range(flavors)]
    t1 = time.perf_counter()
    ours = [water_fill(claims, capacity) for _ in range(flavors)]
    t2 = time.perf_counter()
    assert base[0] == ours[0], "water_fill and the unit-by-unit baseline disagree"
    plans, _, _ = plan_pools(pools, demands, policy)
    t3 = time.perf_counter()
    again, _, _ = plan_pools(pools, demands, policy)
    assert again == plans, "not deterministic"
    entries = sum(len(p.queues) for p in plans)
    conflicts = sum(p.conflict is not None for p in plans)
    print(f"| {queues:,} x {flavors} | {entries:,} | {capacity:,} | {t1 - t0:.3f} s | {t2 - t1:.3f} s | "
          f"{(t1 - t0) / (t2 - t1):.1f}x | {t3 - t2:.2f} s | {conflicts} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000x20", help="QUEUESxFLAVORS, comma separated")
    args = parser.parse_args()
    print("| queues x flavors | entries | capacity of one flavor (units) | baseline: unit-by-unit heap, "
          "F pools | water_fill, F pools | speed-up | plan_pools (whole plan) | conflicts |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for size in args.sizes.split(","):
        q, f = (int(x) for x in size.split("x"))
        run(q, f)


if __name__ == "__main__":
    main()
