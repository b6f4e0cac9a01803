"""The one time vocabulary: durations and times as every flag, config file and scenario spells them.

A duration is a number of seconds (``90``, ``1.5``) or one or more ``<number><unit>`` parts, units
``ms``, ``s``, ``m``, ``h``, ``d``, ``w`` (``500ms``, ``15s``, ``1.5h``, ``1h30m``, ``1d 12h``, ``2w``).
A time is Unix seconds (``1790000000``), ISO 8601 / RFC 3339 (``2026-11-28T00:00:00Z``, UTC when it
has no offset), ``now`` or ``now`` plus or minus a duration (``now-1h``).

``duration_seconds`` and ``time_seconds`` raise ``ValueError`` (pydantic validators use them, and a
command's flag table names the flag); ``parse_duration`` and ``parse_time`` raise a ``UserError``
naming the flag, for values a command reads itself.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime

from gpulens.core.errors import UserError

DURATION_EXAMPLES = "90s, 5m, 1.5h, 1h30m, 14d, 2w"
TIME_EXAMPLES = "now, now-1h, Unix seconds or ISO 8601 (2026-11-28T00:00:00Z)"
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_PART = re.compile(rf"({_NUMBER})\s*(ms|s|m|h|d|w)")
_DURATION = re.compile(rf"\s*(?:{_NUMBER}|(?:{_NUMBER}\s*(?:ms|s|m|h|d|w)\s*)+)\s*")


def is_duration(text: str) -> bool:
    """Whether ``text`` is spelled as a duration (its value may still be out of a setting's range)."""
    return _DURATION.fullmatch(text) is not None


def duration_seconds(value: str | float | int) -> float:
    """Seconds (0 or more) in a duration or a plain number; ``ValueError`` on anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r} (use e.g. {DURATION_EXAMPLES})")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"not a duration: {value!r} (use e.g. {DURATION_EXAMPLES})")
        return float(value)
    if not isinstance(value, str) or not is_duration(value):
        raise ValueError(f"not a duration: {value!r} (use e.g. {DURATION_EXAMPLES})")
    text = value.strip()
    parts = _PART.findall(text)
    return sum(float(n) * _UNITS[u] for n, u in parts) if parts else float(text)


def parse_duration(text: str, *, what: str = "duration") -> float:
    """Seconds in ``text``, which must be positive; a ``UserError`` naming ``what`` (the flag) otherwise."""
    try:
        seconds = duration_seconds(text)
    except ValueError:
        raise UserError(f"invalid {what} {text!r}: use e.g. {DURATION_EXAMPLES}") from None
    if seconds <= 0:
        raise UserError(f"invalid {what} {text!r}: must be positive")
    return seconds


def time_seconds(value: str | float | int | datetime, *, clock: Callable[[], float] = time.time) -> float:
    """Unix seconds of a time (a ``datetime`` without offset is UTC); ``ValueError`` on anything else."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"not a time: {value!r} (use {TIME_EXAMPLES})")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"not a time: {value!r} (use {TIME_EXAMPLES})")
        return float(value)
    text = value.strip()
    if text.startswith("now"):
        rest = text[3:].strip()
        if not rest:
            return clock()
        if rest[0] in "+-" and is_duration(rest[1:]):
            delta = duration_seconds(rest[1:])
            return clock() + (delta if rest[0] == "+" else -delta)
        raise ValueError(f"not a time: {value!r} (use {TIME_EXAMPLES})")
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(seconds):
            return seconds
        raise ValueError(f"not a time: {value!r} (use {TIME_EXAMPLES})")
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"not a time: {value!r} (use {TIME_EXAMPLES})") from None
    return time_seconds(parsed)


def parse_time(text: str, *, what: str = "time", clock: Callable[[], float] = time.time) -> float:
    """Unix seconds from ``text``; a ``UserError`` naming ``what`` (the flag) when it is not a time."""
    try:
        return time_seconds(text, clock=clock)
    except ValueError:
        raise UserError(f"invalid {what} {text!r}: use {TIME_EXAMPLES}") from None


def utc_datetime(seconds: float) -> datetime:
    """Unix seconds as an aware UTC ``datetime``; ``ValueError`` beyond the years a ``datetime`` holds."""
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"not a time: {seconds!r} is out of range") from None


def format_time(ts: float) -> str:
    """Unix seconds as RFC 3339 UTC to the second (``2026-11-28T00:00:00Z``), as ``parse_time`` reads it."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
