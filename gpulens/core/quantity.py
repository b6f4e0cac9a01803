"""Kubernetes quantities (``4``, ``500m``, ``80Gi``) as numbers."""

from __future__ import annotations

import re
from typing import Any

_SUFFIX = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")


def parse_quantity(value: Any) -> float | None:
    """A Kubernetes quantity (``4``, ``500m``, ``80Gi``) as a number; ``None`` when absent or invalid."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    return float(match.group(1)) * _SUFFIX.get(match.group(2) or "", 1.0)
