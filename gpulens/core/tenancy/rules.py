"""Tenant-resolution rules (configurable order), loaded from YAML with clear errors.

Default order: a pod label, the Kueue queue (the ClusterQueue Kueue labels the pod with, else
LocalQueue -> ClusterQueue), a vCluster host
label, a Capsule tenant label on the namespace, a namespace label, else the namespace name. The same
config drives the exporter (``--tenancy-config``) and the collector (``collect --kubernetes
--tenancy-config``); :mod:`gpulens.core.tenancy.pod_tenancy` applies it.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gpulens.core.config import load_yaml_model


class RuleKind(StrEnum):
    POD_LABEL = "pod_label"
    KUEUE = "kueue"
    VCLUSTER = "vcluster"
    CAPSULE = "capsule"
    NAMESPACE_LABEL = "namespace_label"
    NAMESPACE = "namespace"


DEFAULT_KEYS: dict[RuleKind, str] = {
    RuleKind.POD_LABEL: "gpulens.io/tenant",
    RuleKind.KUEUE: "kueue.x-k8s.io/queue-name",
    RuleKind.VCLUSTER: "vcluster.loft.sh/managed-by",
    RuleKind.CAPSULE: "capsule.clastix.io/tenant",
    RuleKind.NAMESPACE_LABEL: "gpulens.io/tenant",
    RuleKind.NAMESPACE: "",
}
KUEUE_API_VERSIONS = ("v1beta2", "v1beta1")
"""Kueue API versions gpulens reads (the configured one is tried first, the others on 404)."""


class Rule(BaseModel):
    """One rule: ``kind`` and, for label rules, the label ``key`` (a sensible default per kind)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: RuleKind
    key: str | None = None

    @property
    def label(self) -> str:
        return self.key or DEFAULT_KEYS[self.kind]


def default_rules() -> list[Rule]:
    return [Rule(kind=k) for k in RuleKind]


class TenancyConfig(BaseModel):
    """``rules`` in order (first answer wins; ``namespace`` always answers) and cache lifetimes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rules: list[Rule] = Field(default_factory=default_rules, min_length=1)
    cache_seconds: float = Field(default=60.0, gt=0)
    """How long namespaces, LocalQueues, owners and ResourceSlices stay cached."""
    pods_refresh_seconds: float = Field(default=30.0, gt=0)
    """Longest time between two lists of this node's pods (a pod not yet seen triggers one sooner)."""
    kueue_api_version: str = "v1beta1"
    """Kueue API version tried first; the other versions of :data:`KUEUE_API_VERSIONS` follow on 404."""
    cluster_queue_tenant_label: str = "gpulens.io/tenant"
    """Label of a ClusterQueue that names its tenant (without it, the ClusterQueue's name is the tenant)."""
    api_timeout_seconds: float = Field(default=2.0, gt=0)
    """Timeout of one Kubernetes API request (lookups run on the collection cycle)."""


    def kueue_versions(self) -> tuple[str, ...]:
        """Kueue API versions in the order to try them."""
        return (self.kueue_api_version, *(v for v in KUEUE_API_VERSIONS if v != self.kueue_api_version))


def load_tenancy_config(path: Path | None) -> TenancyConfig:
    """The config at ``path`` (``UserError`` naming the file and field when invalid), defaults when None."""
    return TenancyConfig() if path is None else load_yaml_model(path, TenancyConfig)
