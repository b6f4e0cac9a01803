"""Value hashes for frozen dataclasses that hold mappings: equal values hash alike, as ``==`` requires."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any


def _hashable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    return value


def value_hash(obj: Any) -> int:
    """A hash of a dataclass instance consistent with its generated ``__eq__`` (mappings as sorted items)."""
    return hash(tuple(_hashable(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.compare))
