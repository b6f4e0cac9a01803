"""How the fake API server merges a write into a stored object, list by list, as the real one does.

The API server's merge rules come from the OpenAPI schema of each type: a list is ``atomic`` (one
value: whoever writes it writes all of it), a ``map`` keyed by ``x-kubernetes-list-map-keys`` (each
element its own value) or a ``set`` (each scalar its own value). :data:`LIST_RULES` holds those
markers for the fields of the objects gpulens writes or that tests store, copied from the upstream
schemas (``k8s.io/api`` ``+listType`` markers; Kueue's ``+listType`` markers); an undeclared list is
atomic, as it is for a CRD without markers.

Three writes are modelled:

- **server-side apply** (:func:`apply`): field ownership per field manager. The applied fields are
  merged in (an atomic list replaces the stored one whole); a field another manager owns with a
  different value is a conflict unless ``force``, which takes it over; a field this manager applied
  before and leaves out now is removed when no other manager owns it.
- **JSON merge patch** (:func:`merge_patch`, RFC 7386): maps merge, ``null`` deletes a key, every list
  is replaced whole. The fields the patch changed move to its manager.
- **update** (``PUT``, :func:`changed_fields`): the body replaces the object; changed fields move to
  its manager.
"""

from __future__ import annotations

import copy
import json
from typing import Any

Path = tuple[Any, ...]
"""A field path: map keys, ``("k", key values)`` for an element of a map list, ``("v", json)`` of a set."""

ATOMIC = ("atomic",)
LIST_RULES: dict[str, dict[str, tuple[Any, ...]]] = {
    "*": {
        "metadata.ownerReferences": ("map", ("uid",)),
        "metadata.finalizers": ("set",),
    },
    "Node": {
        "spec.taints": ATOMIC,  # NodeSpec.Taints: +listType=atomic
        "spec.podCIDRs": ("set",),
        "status.conditions": ("map", ("type",)),
        "status.addresses": ("map", ("type",)),
    },
    "ClusterQueue": {
        "spec.resourceGroups": ATOMIC,  # Kueue ClusterQueueSpec.ResourceGroups: +listType=atomic
    },
    "DeviceTaintRule": {},
    "ResourceQuota": {},
}
SKIPPED = {("metadata", "resourceVersion"), ("metadata", "managedFields"), ("metadata", "name"),
           ("metadata", "namespace"), ("apiVersion",), ("kind",)}


def rule(kind: str, schema_path: tuple[str, ...]) -> tuple[Any, ...]:
    """The list rule of a field (``atomic`` unless the schema says otherwise)."""
    dotted = ".".join(schema_path)
    return LIST_RULES.get(kind, {}).get(dotted) or LIST_RULES["*"].get(dotted) or ATOMIC


def fields(obj: Any, kind: str, prefix: Path = (), schema: tuple[str, ...] = ()) -> dict[Path, Any]:
    """Every leaf field of ``obj`` with its value, as the API server tracks ownership."""
    out: dict[Path, Any] = {}
    if not isinstance(obj, dict):
        return {prefix: obj}
    for key, value in obj.items():
        path, spath = (*prefix, key), (*schema, key)
        if path in SKIPPED:
            continue
        if isinstance(value, dict) and value:
            out.update(fields(value, kind, path, spath))
        elif isinstance(value, list):
            how = rule(kind, spath)
            if how[0] == "map":
                for element in value:
                    ek = (*path, ("k", tuple(element.get(k) for k in how[1])))
                    out.update(fields(element, kind, ek, spath) if element else {ek: {}})
            elif how[0] == "set":
                out.update({(*path, ("v", json.dumps(v, sort_keys=True))): v for v in value})
            else:
                out[path] = value
        else:
            out[path] = value
    return out


def merge(into: dict[str, Any], patch: dict[str, Any], kind: str, schema: tuple[str, ...] = ()) -> None:
    """Merge applied fields into a stored object by the list rules (atomic lists are replaced whole)."""
    for key, value in patch.items():
        spath = (*schema, key)
        current = into.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            merge(current, value, kind, spath)
        elif isinstance(value, list) and isinstance(current, list) and rule(kind, spath)[0] == "map":
            keys = rule(kind, spath)[1]
            for element in value:
                match = next((e for e in current if all(e.get(k) == element.get(k) for k in keys)), None)
                if match is None:
                    current.append(copy.deepcopy(element))
                else:
                    merge(match, element, kind, spath)
        elif isinstance(value, list) and isinstance(current, list) and rule(kind, spath)[0] == "set":
            current.extend(copy.deepcopy(v) for v in value if v not in current)
        else:
            into[key] = copy.deepcopy(value)


def remove(obj: dict[str, Any], path: Path, kind: str, schema: tuple[str, ...] = ()) -> None:
    """Delete one leaf field, and the maps or map-list elements it leaves empty."""
    head, rest = path[0], path[1:]
    child = obj.get(head)
    spath = (*schema, head)
    if not rest:
        obj.pop(head, None)
        return
    if isinstance(child, dict):
        remove(child, rest, kind, spath)
        if not child:
            obj.pop(head)
    elif isinstance(child, list) and isinstance(rest[0], tuple):
        tag, ident = rest[0]
        how = rule(kind, spath)
        for i, element in enumerate(child):
            if tag == "v":
                matches = json.dumps(element, sort_keys=True) == ident
            else:
                matches = isinstance(element, dict) and tuple(element.get(k) for k in how[1]) == ident
            if not matches:
                continue
            if tag == "v" or len(rest) == 1:
                child.pop(i)
            else:
                remove(element, rest[1:], kind, spath)
                if set(element) <= set(how[1]):
                    child.pop(i)
            break
        if not child:
            obj.pop(head)


def value_at(flat: dict[Path, Any], path: Path) -> Any:
    return flat.get(path, _MISSING)


_MISSING = object()


class Conflict(Exception):
    """Server-side apply without force touched fields another manager owns with another value."""

    def __init__(self, owners: list[tuple[str, Path]]) -> None:
        super().__init__("; ".join(f"conflict with {m!r}: {'.'.join(map(str, p))}" for m, p in owners))


def apply(stored: dict[str, Any], body: dict[str, Any], owners: dict[str, set[Path]], manager: str,
          *, force: bool) -> None:
    """Server-side apply ``body`` as ``manager`` into ``stored`` (in place), updating ``owners``.

    ``owners`` maps a manager (``name`` for the object, ``name/status`` for its status subresource) to
    the fields it owns; ``body`` holds only the fields of the part being applied.
    """
    kind = str(body.get("kind") or stored.get("kind") or "")
    live, wanted = fields(stored, kind), fields(body, kind)
    conflicts = [(m, p) for m, owned in owners.items() if m != manager for p in owned
                 if p in wanted and value_at(live, p) != wanted[p]]
    if conflicts and not force:
        raise Conflict(conflicts)
    for m, p in conflicts:
        owners[m].discard(p)
    dropped = owners.get(manager, set()) - set(wanted)
    for p in sorted(dropped, key=len, reverse=True):
        if not any(p in owned for m, owned in owners.items() if m != manager):
            remove(stored, p, kind)
    merge(stored, body, kind)
    owners[manager] = set(wanted)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: a map merges key by key, ``null`` deletes, anything else (every list) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def take_changed(before: dict[str, Any], after: dict[str, Any], owners: dict[str, set[Path]], manager: str) -> None:
    """After an update or a merge patch: the fields that changed belong to ``manager``; removed ones to no one."""
    kind = str(after.get("kind") or before.get("kind") or "")
    old, new = fields(before, kind), fields(after, kind)
    changed = {p for p in new if value_at(old, p) != new[p]}
    gone = set(old) - set(new)
    for m in owners:
        owners[m] -= changed | gone
    owners.setdefault(manager, set()).update(changed)
