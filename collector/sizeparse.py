"""Parse the command line's sizes (``64MiB``, ``512KiB``, ``1GB``, ``1048576``) into bytes."""

from __future__ import annotations

import re

from gpulens.core.errors import UserError

_UNITS = {
    "": 1, "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3,
}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str, *, what: str = "size") -> int:
    """Bytes in ``text`` (``64MiB``, ``1.5GB``, ``4096``); must be at least one byte."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS:
        raise UserError(f"invalid {what} {text!r}: use e.g. 64MiB, 512KiB or 1GB")
    size = int(float(match.group(1)) * _UNITS[unit])
    if size < 1:
        raise UserError(f"invalid {what} {text!r}: must be at least 1 byte")
    return size
