"""Workload rightsizing: the smallest MIG profile (or fewer GPUs) that fits what a workload really uses."""

from analytics.rightsizing.confidence import Confidence, vpa_confidence
from analytics.rightsizing.evidence import WorkloadUsage, load_workload_usage
from analytics.rightsizing.strategy import (
    MigFitSettings,
    MigFitStrategy,
    RightsizingStrategy,
    WorkloadRecommendation,
)

__all__ = [
    "Confidence",
    "MigFitSettings",
    "MigFitStrategy",
    "RightsizingStrategy",
    "WorkloadRecommendation",
    "WorkloadUsage",
    "load_workload_usage",
    "vpa_confidence",
]
