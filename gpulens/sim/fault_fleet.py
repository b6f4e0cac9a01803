"""A fleet for health backtests: degrading GPUs with known onsets and failures, sudden failures, look-alikes.

``fault_fleet(nodes, days, seed)`` builds the scenario; ``known_faults(scenario)`` gives the ground truth
(which GPU fails when, and from which precursor). Half the nodes are H100 training nodes, half H200
inference nodes (two flavors). Onsets, leads (2 h to 1 day, log-uniform), intensities and look-alike
lengths (20 min to 4 h) are drawn from the seed, so a backtest is repeatable and a different seed is a different fleet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpulens.sim.noise import stable_unit
from gpulens.sim.scenario import FaultKind, FaultSpec, Precursor, Scenario

DAY = 86400.0
HOUR = 3600.0


@dataclass(frozen=True)
class KnownFault:
    """Ground truth for one GPU: its hard failure (None for a look-alike) and the precursor kind."""

    node: str
    gpu: int
    kind: str
    """``degradation``, ``sudden`` (no precursor) or ``lookalike``."""
    precursor: str | None
    onset_rel: float
    failure_rel: float | None


def fault_fleet(nodes: int = 40, days: float = 5.0, seed: int = 1, *, degrading_share: float = 0.08,
                lookalike_share: float = 0.08, sudden_share: float = 0.01) -> Scenario:
    """A two-pool fleet of ``nodes`` x 8 GPUs with faults placed over ``days`` (first day kept clean)."""
    half = max(1, nodes // 2)
    pools = [
        {"name": "train-h100", "gpu_model": "H100", "nodes": half, "flavor": "h100-80gb"},
        {"name": "serve-h200", "gpu_model": "H200", "nodes": max(1, nodes - half), "flavor": "h200-141gb"},
    ]
    gpus = [(f"{p['name']}-{i}", g) for p in pools for i in range(int(p["nodes"])) for g in range(8)]  # type: ignore[call-overload]
    faults: list[dict[str, object]] = []
    precursors = list(Precursor)
    for n, (node, gpu) in enumerate(gpus):
        u = stable_unit(seed, "fault", node, gpu)
        v = [stable_unit(seed, "shape", node, gpu, i) for i in range(4)]
        onset = DAY + v[0] * (days - 1.6) * DAY
        kind = precursors[n % len(precursors)]
        if u < degrading_share:
            lead = 2 * HOUR * math.exp(v[1] * math.log(12.0))
            faults.append({"kind": "degradation", "node": node, "gpu": gpu, "at": onset, "precursor": kind,
                           "fail_after": lead, "intensity": 0.6 + 0.8 * v[2], "duration": HOUR})
        elif u < degrading_share + lookalike_share:
            faults.append({"kind": "lookalike", "node": node, "gpu": gpu, "at": onset, "precursor": kind,
                           "intensity": 0.7 + 0.6 * v[2], "duration": 20 * 60 + v[3] * 220 * 60})
        elif u < degrading_share + lookalike_share + sudden_share:
            faults.append({"kind": "xid79", "node": node, "gpu": gpu, "at": onset, "duration": HOUR})
    return Scenario.model_validate({
        "name": f"fault-fleet-{nodes}x8-seed{seed}",
        "description": "Backtest fleet: degrading GPUs with known onset and failure, look-alikes, sudden failures.",
        "seed": seed,
        "step": 300,
        "pools": pools,
        "tenants": [{"name": "llm", "namespaces": [{"name": "llm", "network_policies": 1}]},
                    {"name": "serving", "namespaces": [{"name": "serving", "network_policies": 1}]}],
        "workloads": [
            {"name": "pretrain", "tenant": "llm", "archetype": "training", "pool": "train-h100", "pods": half,
             "devices_per_pod": 8},
            {"name": "chat", "tenant": "serving", "archetype": "inference", "pool": "serve-h200",
             "pods": 8 * max(1, nodes - half)},
        ],
        "faults": faults,
    })


def known_faults(scenario: Scenario) -> list[KnownFault]:
    """Ground truth of every degradation, sudden XID 79 and look-alike in the scenario."""
    out = []
    for f in scenario.faults:
        out.append(_truth(f))
    return out


def _truth(f: FaultSpec) -> KnownFault:
    if f.kind is FaultKind.DEGRADATION:
        failure = None if f.fail_after is None else f.at + f.fail_after
        return KnownFault(f.node, f.gpu, "degradation", str(f.precursor), f.at, failure)
    if f.kind is FaultKind.LOOKALIKE:
        return KnownFault(f.node, f.gpu, "lookalike", str(f.precursor), f.at, None)
    if f.kind is FaultKind.XID79 or f.kind is FaultKind.XID48:
        return KnownFault(f.node, f.gpu, "sudden", None, f.at, f.at)
    return KnownFault(f.node, f.gpu, "lookalike", str(f.kind), f.at, None)
