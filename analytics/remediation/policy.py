"""The remediation policy: which taint, which states, the caps, the breaker and the opt-out (pydantic, clear errors)."""

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
OUR_ANNOTATIONS = (EVIDENCE, WINDOW, RUN, TAINTED_AT)
"""The annotations gpulens sets on a Node it taints, and removes when it untaints (nothing else)."""
MANAGED_BY = "app.kubernetes.io/managed-by"
NODE_ANNOTATION = "gpulens.io/node"
"""Annotation of a DeviceTaintRule gpulens owns: the Node whose device it quarantines."""

Scope = Literal["auto", "device", "node"]
LONGEST_SECONDS = 3660 * 86400
"""Ten years: the longest healthy period or breaker window (a longer one overflows dates and means never)."""


class RemediationPolicy(BaseModel):
    """Guard rails of ``gpulens remediate``; every value is reported with the plan."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_share: float = Field(0.10, ge=0, le=1)
    """At most this share of a flavor's nodes quarantined at once (rounded down, but at least one)."""
    max_nodes: int | None = Field(None, ge=0)
    """At most this many nodes of a flavor quarantined at once (None: only the share counts)."""
    no_execute_states: frozenset[Literal["watch", "warn", "drain"]] = frozenset()
    """States whose taint is NoExecute (evicts running pods) instead of NoSchedule; none by default."""
    healthy_seconds: float = Field(24 * 3600, ge=0, le=LONGEST_SECONDS)
    """Remove our taint once the node has been healthy this long (and the analysis window covers it)."""
    breaker_share: float = Field(0.5, gt=0, le=1)
    """No new taint anywhere when more than this share of a flavor turned unhealthy within the breaker window."""
    breaker_seconds: float = Field(3600, gt=0, le=LONGEST_SECONDS)
    """The breaker window, ending at the end of the analysed window."""
    scope: Scope = "auto"
    """``device`` (a DRA DeviceTaintRule), ``node`` (a Node taint) or ``auto``: device where the cluster has it."""

    def cap(self, nodes: int) -> int:
        """Most nodes of a flavor of ``nodes`` quarantined at once: the share rounded down, at least one
        (a flavor that keeps a schedulable node may lose one), never over ``max_nodes``."""
        share = int(self.max_share * nodes + 1e-9)
        cap = max(share, 1) if self.max_share > 0 else 0
        return cap if self.max_nodes is None else min(cap, self.max_nodes)
