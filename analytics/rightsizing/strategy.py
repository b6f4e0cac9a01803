"""Rightsizing strategies: small classes with typed settings that turn usage into a recommended shape.

``MigFitStrategy`` follows Kruize's accelerator approach with krr/VPA defaults: compute need = P95 of
compute activity in GPU-equivalents, memory need = P99 of memory, each plus headroom (15%), and never
below the observed memory peak; the recommendation is the smallest MIG profile on the workload's GPU
model that covers both, or the fewest whole GPUs for multi-GPU workloads.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from analytics.rightsizing.confidence import Confidence, vpa_confidence
from analytics.rightsizing.evidence import WorkloadUsage
from gpulens.core.device_model import WHOLE_GPU_PROFILE
from gpulens.core.mig_catalog import COMPUTE_SLICES, GpuModel, MigProfile, model_by_name

GIB = 1024**3


class RightsizingSettings(BaseModel):
    """Settings every rightsizing strategy shares."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    headroom: float = Field(default=0.15, ge=0, le=2, description="Fraction added on top of the measured need.")
    compute_percentile: float = Field(default=0.95, gt=0, le=1, description="Percentile of compute activity (GE).")
    memory_percentile: float = Field(default=0.99, gt=0, le=1, description="Percentile of memory used.")
    min_samples: int = Field(default=100, ge=1, description="Fewer sample times: no recommendation (krr default).")
    min_history_hours: float = Field(default=3.0, ge=0, description="Shorter history: no recommendation.")
    low_confidence_days: float = Field(
        default=2.0, ge=0, description="Confidence (VPA-style, in days) below which a recommendation is low-confidence."
    )
    saturation: float = Field(
        default=0.95, gt=0, le=1,
        description="A shape whose P95 compute or peak memory reaches this share of it is saturated and may grow.",
    )
    memory_only_confidence_factor: float = Field(
        default=0.5, gt=0, le=1, description="Confidence multiplier when compute activity is not measured."
    )


class MigFitSettings(RightsizingSettings):
    """Settings of the MIG-fit strategy."""

    allow_mig: bool = Field(default=True, description="Propose MIG profiles (else only whole-GPU counts).")


@dataclass(frozen=True)
class WorkloadRecommendation:
    """The recommended device shape for one workload, with the evidence and the reasons."""

    usage: WorkloadUsage
    action: str
    """``shrink``, ``grow``, ``keep``, ``reshape`` (current shape unknown) or ``insufficient_data``."""
    recommended_profile: str | None
    """``gpu`` or a MIG profile name; ``None`` when there is not enough data."""
    recommended_devices_per_pod: int | None
    compute_need_ge: float | None
    memory_need_bytes: float
    confidence: Confidence
    reasons: tuple[str, ...]
    strategy: str

    @property
    def converts_to_mig(self) -> bool:
        """A whole-GPU workload that fits a MIG profile, with enough confidence to act on."""
        return (
            self.usage.current_profile == WHOLE_GPU_PROFILE
            and self.recommended_profile not in (None, WHOLE_GPU_PROFILE)
            and not self.confidence.is_low
        )


S = TypeVar("S", bound=RightsizingSettings)


class RightsizingStrategy(ABC, Generic[S]):
    """A rightsizing policy: ``run`` maps one workload's usage to a recommendation."""

    name: ClassVar[str]

    def __init__(self, settings: S) -> None:
        self.settings = settings

    @abstractmethod
    def run(self, usage: WorkloadUsage, sample_step_seconds: float) -> WorkloadRecommendation: ...


class MigFitStrategy(RightsizingStrategy[MigFitSettings]):
    """Smallest MIG profile (or fewest GPUs) covering P95 compute and P99/peak memory plus headroom."""

    name = "mig-fit"

    def run(self, usage: WorkloadUsage, sample_step_seconds: float) -> WorkloadRecommendation:
        s = self.settings
        measured = usage.compute_p95_ge is not None and usage.compute_samples >= s.min_samples
        confidence = vpa_confidence(
            usage.span_seconds + sample_step_seconds, usage.samples, sample_step_seconds,
            low_below_days=s.low_confidence_days,
            factor=1.0 if measured else s.memory_only_confidence_factor,
        )
        memory_need = max(usage.memory_p99_bytes * (1 + s.headroom), float(usage.memory_peak_bytes))
        compute_need = usage.compute_p95_ge * (1 + s.headroom) if measured and usage.compute_p95_ge is not None else None
        reasons = [_evidence_sentence(usage, confidence)]

        def result(action: str, profile: str | None, per_pod: int | None) -> WorkloadRecommendation:
            return WorkloadRecommendation(
                usage=usage, action=action, recommended_profile=profile, recommended_devices_per_pod=per_pod,
                compute_need_ge=compute_need, memory_need_bytes=memory_need, confidence=confidence,
                reasons=tuple(reasons), strategy=self.name,
            )

        if usage.samples < s.min_samples or usage.span_seconds < s.min_history_hours * 3600:
            reasons.append(
                f"not enough data: needs at least {s.min_samples} samples over {s.min_history_hours:g} h"
            )
            return result("insufficient_data", None, None)
        try:
            model = model_by_name(usage.gpu_model)
        except ValueError:
            reasons.append(f"GPU model {usage.gpu_model!r} has no MIG catalog; shape kept")
            return result("keep", usage.current_profile, usage.devices_per_pod)
        if not measured:
            where = (
                f"on {model.short_name} MIG (no per-instance GPM)" if usage.current_profile != WHOLE_GPU_PROFILE
                else "for this workload"
            )
            reasons.append(f"compute activity is not measured {where}; sized by memory only, with lower confidence")
        else:
            signal = ", ".join(usage.activity_signals) or "activity_ratio (signal not recorded)"
            reasons.append(
                f"compute P{s.compute_percentile * 100:g} is {usage.compute_p95_ge:.2f} GE (from {signal}), "
                f"need {compute_need:.2f} GE with {s.headroom:.0%} headroom"
            )
        reasons.append(
            f"memory P{s.memory_percentile * 100:g} is {usage.memory_p99_bytes / GIB:.1f} GiB, "
            f"peak {usage.memory_peak_bytes / GIB:.1f} GiB, need {memory_need / GIB:.1f} GiB"
        )
        name, per_pod, shape = self._smallest_shape(model, usage, compute_need, memory_need)
        current = _capacity(model, usage.current_profile, usage.devices_per_pod)
        proposed = _capacity(model, name, per_pod)
        same = name == usage.current_profile and per_pod == usage.devices_per_pod
        action = "keep" if same else _compare(current, proposed)
        kept = f"{usage.current_profile} x{usage.devices_per_pod} kept"
        if action == "grow" and current is not None and _holds(current, usage, s.saturation):
            reasons.append(
                f"the need with headroom alone would take {shape}; the current {usage.current_profile} "
                f"x{usage.devices_per_pod} holds the observed peak memory and P{s.compute_percentile * 100:g} "
                f"compute below {s.saturation:.0%}: not growing on headroom alone, {kept}"
            )
            return result("keep", usage.current_profile, usage.devices_per_pod)
        if name == usage.current_profile == WHOLE_GPU_PROFILE and per_pod > usage.devices_per_pod:
            reasons.append(
                f"the need would take {shape}, but the workload is saturated at {usage.devices_per_pod} GPU(s) "
                "per pod; more GPUs per pod only help a workload that shards across them (consider more "
                f"replicas): {kept}"
            )
            return result("keep", usage.current_profile, usage.devices_per_pod)
        if action == "keep":  # the same shape, or another of the same capacity: nothing to change
            reasons.append(f"{shape}: {kept}")
            return result("keep", usage.current_profile, usage.devices_per_pod)
        reasons.append(f"{shape}: {action} to {name} x{per_pod}")
        return result(action, name, per_pod)

    def _smallest_shape(
        self, model: GpuModel, usage: WorkloadUsage, compute_need: float | None, memory_need: float,
    ) -> tuple[str, int, str]:
        """(profile or ``gpu``, devices per pod, that shape in words) of the smallest shape covering the need."""
        gpus = max(
            math.ceil(compute_need - 1e-9) if compute_need is not None else 1,
            math.ceil(memory_need / model.memory_bytes - 1e-9),
            1,
        )
        if gpus > 1:
            return WHOLE_GPU_PROFILE, gpus, f"gpu x{gpus} ({gpus} whole GPUs per pod)"
        profile = _smallest_fit(model, compute_need, memory_need) if self.settings.allow_mig else None
        if profile is None or profile.compute_slices == COMPUTE_SLICES:
            if usage.devices_per_pod > 1:
                why = f"one whole GPU per pod instead of {usage.devices_per_pod}"
            elif self.settings.allow_mig:
                why = "no MIG profile smaller than a whole GPU covers the need"
            else:
                why = "whole GPUs only"
            return WHOLE_GPU_PROFILE, 1, f"gpu x1 ({why})"
        return profile.name, 1, (
            f"{profile.name} x1 ({profile.compute_slices}/{COMPUTE_SLICES} compute, "
            f"{profile.memory_bytes / GIB:.1f} GiB: the smallest {model.short_name} profile that covers the need)"
        )


def _smallest_fit(model: GpuModel, compute_need: float | None, memory_need: float) -> MigProfile | None:
    ordered = sorted(model.mig_profiles, key=lambda p: (p.compute_slices, p.memory_slices))
    for p in ordered:
        if p.memory_bytes >= memory_need and (compute_need is None or p.gpu_equivalents >= compute_need - 1e-9):
            return p
    return None


def _capacity(model: GpuModel, profile: str, count: int) -> tuple[float, int] | None:
    """(GPU-equivalents, memory bytes) of ``count`` devices of ``profile``; ``None`` when unknown.

    Compute-instance profiles (``1c.3g.71gb``) have the compute of their ``c`` slices and the memory of
    their GPU instance.
    """
    if profile == WHOLE_GPU_PROFILE:
        return float(count), count * model.memory_bytes
    parts = profile.split(".")
    ci_slices = None
    if len(parts) == 3 and parts[0].endswith("c") and parts[0][:-1].isdigit():
        ci_slices, profile = int(parts[0][:-1]), ".".join(parts[1:])
    try:
        p = model.profile(profile)
    except ValueError:
        return None
    slices = p.compute_slices if ci_slices is None else ci_slices
    return count * slices / COMPUTE_SLICES, count * p.memory_bytes


def _compare(current: tuple[float, int] | None, proposed: tuple[float, int] | None) -> str:
    if current is None or proposed is None:
        return "reshape"
    if proposed[0] < current[0] - 1e-9 or (abs(proposed[0] - current[0]) < 1e-9 and proposed[1] < current[1]):
        return "shrink"
    if proposed[0] > current[0] + 1e-9 or proposed[1] > current[1]:
        return "grow"
    return "keep"


def _holds(current: tuple[float, int], usage: WorkloadUsage, saturation: float) -> bool:
    """The current shape covers the observed need (without headroom) and is not saturated."""
    compute_ok = usage.compute_p95_ge is None or usage.compute_p95_ge < current[0] * saturation
    return compute_ok and usage.memory_peak_bytes < current[1] * saturation


def _evidence_sentence(usage: WorkloadUsage, confidence: Confidence) -> str:
    return (
        f"{confidence.history_days:.1f} days, {usage.samples} samples: "
        f"confidence {confidence.value:.1f} ({confidence.label})"
    )
