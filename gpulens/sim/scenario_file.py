"""Load a scenario file and validate it whole: its schema (``scenario.py``) and its placement (``plan.py``).

Problems become one ``UserError`` naming the file: YAML syntax, schema violations, and placements the
fleet's GPUs cannot hold.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from gpulens.core.config import read_user_file
from gpulens.core.errors import UserError
from gpulens.sim.plan import build_plan
from gpulens.sim.scenario import DEFAULT_SCENARIO_PATH, Scenario


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(parts)


def parse_scenario(text: str, *, origin: str) -> Scenario:
    """Parse scenario YAML; ``origin`` names the file in error messages."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}:" if mark is not None else ""
        raise UserError(f"{origin}:{where} not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{origin}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{origin}: {_validation_message(exc)}".replace("\n", " ")) from None
    try:  # placement problems are scenario problems too
        build_plan(scenario)
    except ValueError as exc:
        raise UserError(f"{origin}: {exc}") from None
    return scenario


def load_scenario(path: Path | None = None) -> Scenario:
    """Load a scenario file, or the built-in default when ``path`` is None. Problems raise ``UserError``."""
    path = DEFAULT_SCENARIO_PATH if path is None else Path(path)
    return parse_scenario(read_user_file(path, "scenario "), origin=str(path))
