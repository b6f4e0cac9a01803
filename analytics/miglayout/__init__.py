"""MIG layout plans: which GPUs to repartition into which profiles, and how each workload's manifest changes.

``plan_layout`` is pure (GPU states and instance demands in, a deterministic plan out);
``load_layout_inputs`` reads them from the store and a recommendation run; ``write_layout_files``
writes the GPU Operator's mig-parted config, the Node label patches and the workload patches.
"""

from analytics.miglayout.fleet import GpuState, InstanceDemand, load_layout_inputs
from analytics.miglayout.planner import GpuChange, LayoutPlan, Unplaced, plan_layout
from analytics.miglayout.run import LayoutRun, plan_mig_layout, write_layout_files

__all__ = [
    "GpuChange", "GpuState", "InstanceDemand", "LayoutPlan", "LayoutRun", "Unplaced", "load_layout_inputs",
    "plan_layout", "plan_mig_layout", "write_layout_files",
]
