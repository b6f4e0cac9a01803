"""Validation errors in the command line's words: the flag the user typed, in the unit it takes.

Commands build pydantic settings from their flags; pydantic reports field names and internal units
(``window_seconds: Value error``, ``percentile: less than or equal to 1`` for a flag given in %).
Each command declares once which flag feeds which field (``Flag``); ``describe_flag_errors`` then
says ``--window: not a duration (use 90s, 5m, 1.5h, 1h30m, 14d, 2w)`` and ``--percentile: must be at most 100 %``.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import typer
from pydantic import ValidationError

from gpulens.core.errors import UserError
from gpulens.core.timeparse import DURATION_EXAMPLES, is_duration

_WITHIN = {"gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le}
_BOUNDS = {"gt": "must be more than", "ge": "must be at least", "lt": "must be less than", "le": "must be at most"}


@dataclass(frozen=True)
class Flag:
    """The flag behind a settings field: its name, its unit, and how its value becomes the field's."""

    name: str
    unit: str = ""
    """As the user gives it: ``%``, ``days``, ``s`` (shown after bounds)."""
    scale: float = 1.0
    """field value = flag value x scale (a flag in % feeds a ratio: 0.01)."""
    duration: str | None = None
    """Examples when the flag takes a duration (``90s, 5m, 1.5h, 1h30m, 14d, 2w``); None otherwise."""

    def number(self, field_value: Any) -> str:
        """A field value (or bound) in the flag's terms."""
        try:
            value = float(field_value) / self.scale
        except (TypeError, ValueError):
            return repr(field_value)
        text = f"{value:.9g}"  # 0.07 / 0.01 is 7.000000000000001: shown as 7
        return f"{text} {self.unit}" if self.unit else text


def percent(name: str) -> Flag:
    """A flag given in % that feeds a ratio."""
    return Flag(name, "%", 0.01)


def duration(name: str, examples: str = DURATION_EXAMPLES) -> Flag:
    return Flag(name, "s", duration=examples)


def describe_flag_errors(exc: ValidationError, flags: Mapping[str, Flag]) -> str:
    """One message per problem, ``--flag: what is wrong`` where a flag feeds the field, joined by ``; ``.

    ``flags`` is keyed by field name; a nested field (``quota.percentile``) is looked up by its full
    dotted path first, then by its last part. Fields no flag feeds (a config file's) keep their path.
    """
    return "; ".join(_describe(err, _flag_for(err["loc"], flags), flags) for err in exc.errors())


def _in_flag_names(message: str, flags: Mapping[str, Flag]) -> str:
    """Field names (``tls_key_file``) inside a check across fields become their flags."""
    for field in sorted((f for f in flags if "_" in f), key=len, reverse=True):
        message = re.sub(rf"(?<![-\w.]){re.escape(field)}(?![\w])", flags[field].name, message)
    return message


def _flag_for(loc: tuple[int | str, ...], flags: Mapping[str, Flag]) -> Flag | None:
    if not loc:
        return None
    return flags.get(".".join(str(p) for p in loc)) or flags.get(str(loc[-1]))


def _describe(err: Any, flag: Flag | None, flags: Mapping[str, Flag]) -> str:
    message = _plain(err)
    if flag is None:
        where = ".".join(str(p) for p in err["loc"])
        return f"{where}: {message}" if where else _in_flag_names(message, flags)
    given = err.get("input")
    if flag.duration is not None and isinstance(given, str) and not is_duration(given):
        return f"{flag.name}: not a duration (use {flag.duration})"
    ctx = err.get("ctx") or {}
    bound = next(((k, v) for k, v in ctx.items() if k in _BOUNDS), None)
    if bound is not None:
        got = f" (got {flag.number(given)})" if isinstance(given, int | float) else ""
        return f"{flag.name}: {_BOUNDS[bound[0]]} {flag.number(bound[1])}{got}"
    return f"{flag.name}: {message}"


def _plain(err: Any) -> str:
    """pydantic's message without its prefixes (``Value error, ``, ``Input should be``)."""
    message = str(err.get("msg", ""))
    message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if message.startswith("Input should be "):
        message = "should be " + message.removeprefix("Input should be ")
    return message


def number(
    *, ge: float | None = None, gt: float | None = None, le: float | None = None, lt: float | None = None,
    unit: str = "",
) -> Callable[[typer.CallbackParam, float | int | None], float | int | None]:
    """A typer callback for a number flag: NaN, infinities and values out of the bounds given are refused
    by the flag's name (``--healthy-hours: must be a finite number (got nan)``) before the command runs.

    Every ``float`` and ``int`` option of every command takes one (``typer.Option(callback=number(gt=0))``,
    or :data:`finite` for no bounds); a test walks the app to keep it so.
    """

    def check(param: typer.CallbackParam, value: float | int | None) -> float | int | None:
        if value is None:
            return value
        name = param.opts[0] if param.opts else f"--{param.name}"
        flag = Flag(name, unit)
        if not math.isfinite(value):
            raise UserError(f"{name}: must be a finite number (got {value})")
        bounds = {"ge": ge, "gt": gt, "le": le, "lt": lt}
        for kind, bound in bounds.items():
            if bound is not None and not _WITHIN[kind](value, bound):
                raise UserError(f"{name}: {_BOUNDS[kind]} {flag.number(bound)} (got {flag.number(value)})")
        return value

    return check


finite = number()
"""The callback of a number flag without bounds of its own (pydantic settings check its range)."""

DAYS_LIMIT = 3660.0
"""The longest span a flag in days takes (ten years): more than any store holds, and its dates stay in range
(``--days 1e6`` reached year -711; ``1e300`` planned chunks forever)."""


def days(*, ge: float | None = None, gt: float | None = None) -> Callable[
        [typer.CallbackParam, float | int | None], float | int | None]:
    """The callback of a flag in days: finite, within ``ge`` / ``gt``, at most :data:`DAYS_LIMIT`."""
    return number(ge=ge, gt=gt, le=DAYS_LIMIT, unit="days")
