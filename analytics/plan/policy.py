"""The quota plan's policy (``--policy FILE``) and capacity file (``--capacity FILE``), validated by pydantic."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpulens.core.config import load_yaml_model
from gpulens.core.errors import UserError

M = TypeVar("M", bound=BaseModel)

_RESERVE = re.compile(r"^(n\+1|\d+(\.\d+)?%|\d+)$")

MAX_UNITS = 10_000_000
"""More devices than any fleet has: a count above it is a typo (and would overflow the arithmetic)."""
MAX_BUDGET_USD = 1e12
"""A monthly budget above a trillion USD is a typo, not a budget."""
MAX_DAYS = 3650
MAX_RATIO = 1000.0
"""borrowingLimit at most this many times the planned quota."""


class QueuePolicy(BaseModel):
    """Business terms of one ClusterQueue."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: float = Field(1.0, gt=0, le=1000, allow_inf_nan=False,
                          description="Business priority: water-filling share per unit of level.")
    guarantee: int | dict[str, int] = Field(
        0, description="Guaranteed minimum in units: one number for every flavor/resource of the queue, or a map "
        "keyed by 'flavor' or 'flavor/resource'.",
    )

    def guarantee_for(self, flavor: str, resource: str) -> int:
        if isinstance(self.guarantee, int):
            return self.guarantee
        return int(self.guarantee.get(f"{flavor}/{resource}", self.guarantee.get(flavor, 0)))

    @field_validator("guarantee")
    @classmethod
    def _non_negative(cls, v: int | dict[str, int]) -> int | dict[str, int]:
        values = [v] if isinstance(v, int) else list(v.values())
        if any(x < 0 or x > MAX_UNITS for x in values):
            raise ValueError(f"a guarantee is a count of units from 0 to {MAX_UNITS:,}")
        return v


class TenantPolicy(BaseModel):
    """Money terms of one tenant (the tenant of its ClusterQueues)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    monthly_budget_usd: float | None = Field(None, ge=0, le=MAX_BUDGET_USD, allow_inf_nan=False,
                                             description="Cap on the planned quotas' monthly price.")


def _reserve(v: str | int) -> str | int:
    if isinstance(v, int):
        if v < 0 or v > MAX_UNITS:
            raise ValueError(f"a reserve is a count of units from 0 to {MAX_UNITS:,}")
        return v
    if not _RESERVE.match(v.strip().lower()):
        raise ValueError("a reserve is 'n+1', a count of units (8) or a share of capacity ('5%')")
    return v.strip().lower()


class ReservePolicy(BaseModel):
    """Resilience reserve kept out of nominal quotas, per flavor: 'n+1' (the largest node), a count or a share."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: str | int = "n+1"
    flavors: dict[str, str | int] = {}

    @field_validator("default")
    @classmethod
    def _check_default(cls, v: str | int) -> str | int:
        return _reserve(v)

    @field_validator("flavors")
    @classmethod
    def _check_flavors(cls, v: dict[str, str | int]) -> dict[str, str | int]:
        return {k: _reserve(x) for k, x in v.items()}

    def rule_for(self, flavor: str) -> str | int:
        return self.flavors.get(flavor, self.default)


class PlanPolicy(BaseModel):
    """Everything a quota plan depends on besides the store (stored with the plan)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window_days: float = Field(14.0, gt=0, le=MAX_DAYS, allow_inf_nan=False, description="Evidence window (days).")
    default_weight: float = Field(1.0, gt=0, le=1000, allow_inf_nan=False,
                                  description="Weight of queues not listed under queues.")
    queues: dict[str, QueuePolicy] = {}
    tenants: dict[str, TenantPolicy] = {}
    reserve: ReservePolicy = ReservePolicy()
    max_step: float = Field(0.25, gt=0, le=10, allow_inf_nan=False,
                            description="Largest change per apply, as a fraction of current.")
    min_step_units: int = Field(1, ge=1, le=MAX_UNITS, description="A step may always move at least this many units.")
    min_evidence_days_to_cut: float = Field(14.0, ge=0, le=MAX_DAYS, allow_inf_nan=False,
                                            description="No cut on less evidence than this (days).")
    hours_per_month: float = Field(730.0, gt=0, le=744, allow_inf_nan=False, description="Hours in a budget month.")
    borrowing_limit_ratio: float | None = Field(None, ge=0, le=MAX_RATIO, allow_inf_nan=False,
                                                description="Also set borrowingLimit = ratio x planned.")
    lending_limit_ratio: float | None = Field(None, ge=0, le=1, allow_inf_nan=False,
                                              description="Also set lendingLimit = ratio x planned.")
    fair_sharing_weight: bool = Field(False, description="Also set spec.fairSharing.weight to the queue's weight.")
    kueue_version: str = Field("v1beta2", pattern=r"^v1beta[12]$", description="ClusterQueue API version.")

    def queue(self, name: str) -> QueuePolicy:
        return self.queues.get(name) or QueuePolicy(weight=self.default_weight)


class CapacityFile(BaseModel):
    """``flavors: {flavor: {resource: units}}``: capacity per ResourceFlavor and resource (overrides the store)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flavors: dict[str, dict[str, int]] = Field(min_length=1)
    largest_node: dict[str, dict[str, int]] = Field(
        default={}, description="Units of the flavor's largest node per resource (for an 'n+1' reserve).",
    )

    @field_validator("flavors", "largest_node")
    @classmethod
    def _non_negative(cls, v: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        for flavor, resources in v.items():
            for resource, units in resources.items():
                if units < 0 or units > MAX_UNITS:
                    raise ValueError(f"{flavor}/{resource}: capacity is a count of units >= 0 and at most "
                                     f"{MAX_UNITS:,}")
        return v


def load_policy(path: Path | None) -> PlanPolicy:
    return PlanPolicy() if path is None else _load(path, PlanPolicy, "--policy")


def load_capacity(path: Path | None) -> CapacityFile | None:
    return None if path is None else _load(path, CapacityFile, "--capacity")


_BOUNDS = {"gt": "must be more than", "ge": "must be at least", "lt": "must be less than", "le": "must be at most"}


def _load(path: Path, model: type[M], flag: str) -> M:
    """The file as ``model``; a value it refuses is one line naming the flag, the file and the key as written."""
    try:
        return load_yaml_model(path, model)
    except UserError as exc:
        if isinstance(exc.__cause__, ValidationError):
            raise UserError(f"invalid {flag} {path}: {describe_file_errors(exc.__cause__)}") from exc.__cause__
        raise


def describe_file_errors(exc: ValidationError) -> str:
    """``key.path: what is wrong`` per problem, bounds and non-finite numbers in words, joined by ``; ``."""
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {_what(err)}" for err in exc.errors())


def _what(err: Any) -> str:
    given = err.get("input")
    shown = f"{given:g}" if isinstance(given, float) else str(given)
    if err["type"] == "finite_number":
        return f"must be a finite number (got {shown})"
    bound = next(((k, v) for k, v in (err.get("ctx") or {}).items() if k in _BOUNDS), None)
    if bound is not None:
        return f"{_BOUNDS[bound[0]]} {bound[1]:g} (got {shown})"
    return str(err["msg"]).removeprefix("Value error, ")
