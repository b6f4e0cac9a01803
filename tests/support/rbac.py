"""RBAC derived from real traffic: map recorded API requests to the (group, resource, verb) they need.

Tests run a component against ``FakeKubernetesApi``, turn each recorded request into a
:class:`Permission` and compare with the rules of a Role or ClusterRole in ``deploy/``, so the RBAC we
ship is exactly what the code asks for, not a hand-kept list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tests.fakes.kubernetes_api import RecordedRequest

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection", "*"})
_METHOD_VERBS = {"PATCH": "patch", "PUT": "update", "POST": "create", "DELETE": "delete"}


@dataclass(frozen=True)
class Permission:
    """What the API server authorises a request as."""

    api_group: str
    resource: str
    """Plural resource, with ``/subresource`` where there is one (``gpuquotarecommendations/status``)."""
    verb: str
    namespace: str | None
    """The namespace of a namespaced request; None for cluster-scoped objects and cluster-wide lists."""


def is_discovery(path: str) -> bool:
    """``/apis/<group>`` and ``/apis/<group>/<version>``: every authenticated identity may read them (no RBAC)."""
    return path.startswith("/apis/") and path.count("/") <= 3


def permission(request: RecordedRequest) -> Permission:
    """The permission a request needs: a GET of a named object is ``get``, of a collection ``list``."""
    parts = request.path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    if request.method == "GET":
        verb = "watch" if request.query.get("watch") in ("1", "true") else ("get" if len(rest) > 1 else "list")
    else:
        verb = _METHOD_VERBS[request.method]
    return Permission(group, resource, verb, namespace)


def role_rules(documents: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rules of every Role and ClusterRole in ``documents``, each with the namespace it holds in (None: cluster)."""
    return [
        {**rule, "namespace": doc["metadata"].get("namespace") if doc["kind"] == "Role" else None}
        for doc in documents if doc["kind"] in ("ClusterRole", "Role")
        for rule in doc["rules"]
    ]


def granted(rules: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    """Every (api group, resource, verb) the rules grant, expanded."""
    return {(group, resource, verb) for rule in rules for group in rule["apiGroups"]
            for resource in rule["resources"] for verb in rule["verbs"]}


def allowing(rules: list[dict[str, Any]], need: Permission) -> list[int]:
    """Indexes of the rules that allow ``need`` (a Role's rules only in its own namespace)."""
    return [
        i for i, rule in enumerate(rules)
        if need.api_group in rule["apiGroups"] and need.resource in rule["resources"] and need.verb in rule["verbs"]
        and (rule["namespace"] is None or rule["namespace"] == need.namespace)
    ]


def rules_used(requests: Iterable[RecordedRequest], rules: list[dict[str, Any]],
               existing: Iterable[str]) -> set[tuple[int, str]]:
    """The (rule index, verb) pairs the writer's ``requests`` used; fails on a request no rule allows. A
    server-side apply that creates an object (its path not in ``existing``) needs ``create`` too."""
    created = set(existing)
    used: set[tuple[int, str]] = set()
    for req in requests:
        if is_discovery(req.path):
            continue
        needs = [permission(req)]
        if req.method == "PATCH" and req.path not in created and not req.path.endswith("/status"):
            needs.append(replace(needs[0], verb="create"))
            created.add(req.path)
        for need in needs:
            rule_ids = allowing(rules, need)
            assert rule_ids, f"{req.method} {req.path} needs {need.verb}, not granted by deploy/rbac"
            used.update((i, need.verb) for i in rule_ids)
    return used
