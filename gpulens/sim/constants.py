"""What a simulated node's readings depend on but time does not: ``NodeConstants``, computed once per node.

``evaluate.node_constants`` builds it; ``evaluate`` and ``power`` read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpulens.sim.workloads import HoldingTable


@dataclass(frozen=True)
class NodeConstants:
    """Everything about a node that does not depend on time, computed once (``node_constants``)."""

    holdings: HoldingTable
    pod_first_holding: np.ndarray  # (P,) row of each pod's first holding
    batch_pods: np.ndarray  # (P,) bool
    gpu_key: np.ndarray  # (G, 1) uint64
    sbe_per_day: np.ndarray  # (G, 1) corrected ECC errors per day (0 for most GPUs)
    device_gpu: np.ndarray  # (D,) GPU index of each device
    device_share: np.ndarray  # (D, 1) compute share of each device
    device_base: np.ndarray  # (D, 1) driver base memory of the device's GI (bytes)
    device_total: np.ndarray  # (D, 1) memory of the device's GI (bytes)
    device_gi_first: np.ndarray  # (D,) first device of the same GI
    mig_no_gpm: np.ndarray  # (D,) devices whose activity the hardware cannot report
