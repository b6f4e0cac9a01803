"""Parse the command line's durations (``15s``, ``5m``, ``2h``, ``14d``) and times (RFC 3339, Unix, ``now-1h``)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

from gpulens.core.errors import UserError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d|w)?\s*$")


def parse_duration(text: str, *, what: str = "duration") -> float:
    """Seconds in ``text`` (``90``, ``15s``, ``5m``, ``1.5h``, ``14d``); must be positive."""
    match = _DURATION.match(text)
    if not match:
        raise UserError(f"invalid {what} {text!r}: use e.g. 15s, 5m, 2h or 14d")
    seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if seconds <= 0:
        raise UserError(f"invalid {what} {text!r}: must be positive")
    return seconds


def parse_time(text: str, *, what: str = "time", clock: Callable[[], float] = time.time) -> float:
    """Unix seconds from ``text``: Unix seconds, RFC 3339 (``2026-11-28T00:00:00Z``), ``now`` or ``now-6h``."""
    value = text.strip()
    if value.startswith("now"):
        rest = value[3:].strip()
        if not rest:
            return clock()
        if rest[0] in "+-":
            delta = parse_duration(rest[1:], what=what)
            return clock() + (delta if rest[0] == "+" else -delta)
        raise UserError(f"invalid {what} {text!r}: use now, now-6h, Unix seconds or RFC 3339")
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"invalid {what} {text!r}: use now, now-6h, Unix seconds or RFC 3339") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def format_time(ts: float) -> str:
    """Unix seconds as RFC 3339 UTC to the second (``2026-11-28T00:00:00Z``), as ``parse_time`` reads it."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
