"""The remediation policy: which taint, which states, the caps and the opt-out (pydantic, with clear errors)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

TAINT_KEY = "gpulens.io/gpu-unhealthy"
OPT_OUT_ANNOTATION = "gpulens.io/remediate"
"""A Node annotated ``gpulens.io/remediate: "false"`` is never tainted or untainted by gpulens."""
TAINTED_AT = "gpulens.io/tainted-at"
EVIDENCE = "gpulens.io/gpu-unhealthy-evidence"
WINDOW = "gpulens.io/gpu-unhealthy-window"
RUN = "gpulens.io/gpu-unhealthy-run"


class RemediationPolicy(BaseModel):
    """Guard rails of ``gpulens remediate``; every value is reported with the plan."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_share: float = Field(0.10, ge=0, le=1)
    """Never have more than this share of a flavor's nodes tainted at once (rounded down)."""
    no_execute_states: frozenset[Literal["watch", "warn", "drain"]] = frozenset()
    """States whose taint is NoExecute (evicts running pods) instead of NoSchedule; none by default."""
    healthy_seconds: int = Field(24 * 3600, ge=0)
    """Remove our taint once the node has been healthy this long (and the analysis window covers it)."""
