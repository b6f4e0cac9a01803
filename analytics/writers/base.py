"""The quota-object dialects the recommender can write, registered by name (not an if-chain)."""

from __future__ import annotations

import copy
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from analytics.quota import QuotaEvidence
from gpulens.core.kube_api import KubernetesReads

EntryKey = tuple[str, str]
"""(flavor, resource); flavor is '' where the object has none (ResourceQuota)."""

AUTO_APPLY_ANNOTATION = "gpulens.io/auto-apply"
AUDIT_FROM = "gpulens.io/applied-from"
AUDIT_TO = "gpulens.io/applied-to"
AUDIT_AT = "gpulens.io/applied-at"
AUDIT_RECOMMENDATION = "gpulens.io/recommendation"


@dataclass(frozen=True)
class RbacRule:
    """What a writer needs from the API server: verbs on a resource of an API group."""

    api_group: str
    resource: str
    verbs: tuple[str, ...]
    cluster_scoped: bool


class QuotaTarget(ABC):
    """How to read and write one kind of quota object."""

    name: ClassVar[str]
    object_kind: ClassVar[str]
    """The kind as the store names it (qualified by API group where two systems share a Kind name)."""
    api_kind: ClassVar[str | None] = None
    """The ``kind`` of API bodies when ``object_kind`` is qualified (None: ``object_kind`` itself)."""
    rbac: ClassVar[tuple[RbacRule, ...]]
    dry_run_note: ClassVar[str] = ""
    """Comment lines for dry-run files of this kind (what to know before applying them by hand)."""
    queues_work: ClassVar[bool] = False
    """True when the object holds a queue of pending work (a cut waits until it is empty)."""
    pending_what: ClassVar[str] = "workload(s) pending"
    """What :meth:`pending_workloads` counts, in words."""
    pending_field: ClassVar[str] = "status.pendingWorkloads"
    """The live field that says what is pending."""

    def pending_workloads(self, obj: Mapping[str, Any]) -> int | None:
        """Work pending in the live object now (``pending_what``); None when it does not say."""
        return None

    def entry_refusal(self, obj: Mapping[str, Any], key: EntryKey, value: int) -> str | None:
        """Why ``value`` must not be written to entry ``key`` of the live ``obj`` (None: it may be)."""
        return None

    def managed_by(self, obj: Mapping[str, Any]) -> str | None:
        """The controller that owns the object's quota values (gpulens must not write them); None: nobody."""
        return None

    def served(self, api: KubernetesReads) -> tuple[QuotaTarget, str | None]:
        """This target at the API version the cluster serves, and a line saying which (None: nothing to say)."""
        return self, None

    @property
    @abstractmethod
    def api_version(self) -> str: ...

    @abstractmethod
    def path(self, namespace: str, name: str) -> str:
        """The object's URL path on the API server."""

    @abstractmethod
    def object_from_snapshot(self, entries: Sequence[QuotaEvidence]) -> dict[str, Any]:
        """The object as the store last saw it (for dry runs, without a cluster)."""

    @abstractmethod
    def current_values(self, obj: Mapping[str, Any]) -> dict[EntryKey, float]:
        """Quota value per (flavor, resource) in an object."""

    @abstractmethod
    def owned_spec(self, obj: Mapping[str, Any], values: Mapping[EntryKey, int]) -> dict[str, Any]:
        """The part of ``spec`` gpulens applies, with ``values`` written in and everything else as it was."""

    def apply_body(
        self,
        obj: Mapping[str, Any],
        values: Mapping[EntryKey, int],
        annotations: Mapping[str, str],
        *,
        resource_version: str | None = None,
    ) -> dict[str, Any]:
        """The server-side apply body: identity, our annotations and our spec fields only."""
        meta = obj.get("metadata", {})
        metadata = _identity(meta["name"], meta.get("namespace"), annotations)
        if resource_version:
            metadata["resourceVersion"] = resource_version
        return self.object_of(metadata, self.owned_spec(copy.deepcopy(dict(obj)), values))

    def snapshot_object(self, entries: Sequence[QuotaEvidence], spec: dict[str, Any]) -> dict[str, Any]:
        """An object of this kind named after ``entries`` (one object's entries) with the store's annotations."""
        key = entries[0].key
        return self.object_of(_identity(key.name, key.namespace, entries[0].annotations, keep_empty=True), spec)

    @property
    def kind(self) -> str:
        """The ``kind`` of the objects this target writes."""
        return self.api_kind or self.object_kind

    def object_of(self, metadata: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": self.kind, "metadata": metadata, "spec": spec}


def _identity(name: str, namespace: str | None, annotations: Mapping[str, str], *,
              keep_empty: bool = False) -> dict[str, Any]:
    """``metadata`` with name, namespace (when namespaced) and annotations (empty ones only with ``keep_empty``)."""
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if annotations or keep_empty:
        metadata["annotations"] = dict(annotations)
    return metadata


DEVICE_RESOURCE_PREFIX = "nvidia.com/"


def is_device_resource(name: str) -> bool:
    """GPU and MIG extended resources: the only quota entries gpulens reads or writes."""
    return name.removeprefix("requests.").startswith(DEVICE_RESOURCE_PREFIX)


_UNPRINTABLE = re.compile(r"[\\\x00-\x1f\x7f-\x9f\u2028\u2029]")
_SHORT_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(name: str) -> str:
    """``name`` on one line for diffs and tables: backslash and control characters escaped (``\\n``, ``\\u001b``)."""
    return _UNPRINTABLE.sub(lambda m: _SHORT_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), name)


def parse_quantity(value: Any) -> float:
    """A Kubernetes quantity for countable resources: plain numbers, or milli units (``500m``)."""
    text = str(value).strip()
    try:
        return float(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError as exc:
        raise ValueError(f"unsupported quantity {value!r} for a device count") from exc


def format_quantity(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def clear_dry_run_dir(out_dir: str | Path, header: str) -> Path:
    """Create ``out_dir`` and remove the YAML files an earlier dry run wrote there (those whose first line
    starts with ``header``), so the folder holds exactly what this run would apply; nothing else is touched."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.yaml"):
        with old.open(encoding="utf-8", errors="replace") as f:
            if f.readline().startswith(header):
                old.unlink()
    return out
