"""Loading YAML configuration into pydantic models with errors that name the file and field."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gpulens.core.errors import UserError

M = TypeVar("M", bound=BaseModel)


def flag_name(field: str, renames: Mapping[str, str] | None = None) -> str:
    """The command-line flag of a settings field: ``window_seconds`` -> ``--window`` (``renames`` first)."""
    if renames and field in renames:
        return renames[field]
    return "--" + field.removesuffix("_seconds").replace("_", "-")


def describe_validation_error(
    exc: ValidationError, *, flags: bool = False, renames: Mapping[str, str] | None = None
) -> str:
    """One line per problem: ``field.path: message``; with ``flags``, a top-level field is named by its flag."""
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        if flags and loc:
            loc[0] = flag_name(loc[0], renames)
        where = ".".join(loc) or "(top level)"
        parts.append(f"{where}: {str(err['msg']).removeprefix('Value error, ')}")
    return "; ".join(parts)


def read_user_file(path: Path, what: str = "") -> str:
    """The UTF-8 text of a file the user named; unreadable or binary becomes ``cannot read <what><path>: ...``."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read {what}{path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise UserError(f"cannot read {what}{path}: not UTF-8 text (byte {exc.start})") from exc


def load_yaml_model(path: Path, model: type[M]) -> M:
    """Parse ``path`` as YAML into ``model``; any problem becomes a ``UserError`` naming the file."""
    return parse_yaml_model(read_user_file(path), model, origin=str(path))


def parse_yaml_model(text: str, model: type[M], *, origin: str) -> M:
    """Parse YAML text into ``model``; ``origin`` names where it came from in error messages."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"{origin}:{where} is not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UserError(f"{origin}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{origin}: {describe_validation_error(exc)}") from exc
