"""Every number flag of every command refuses NaN and infinities by its name, before the command runs."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any, get_args

import pytest
import typer

from gpulens.cli import app, run
from gpulens.cli.flag_errors import number
from gpulens.core.errors import UserError

DAYS = types.SimpleNamespace(opts=["--days"], name="days")
"""Stands in for the option a callback is given (its flag names are all it reads)."""


def _numeric(annotation: Any) -> bool:
    kinds = set(get_args(annotation)) - {type(None)} if isinstance(annotation, types.UnionType) else {annotation}
    return bool(kinds) and kinds <= {int, float}


def number_flags() -> list[tuple[str, str]]:
    """(command, flag) for every option of the app that takes an int or a float."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    return [(name, param.opts[0]) for name, command in sorted(group.commands.items()) for param in command.params
            if param.opts[0].startswith("--") and _numeric(param.type_descriptor.annotation)]


def _required(command: str, tmp: Path) -> list[str]:
    """Values for the command's required options (a missing store: the flag must be refused before it is read)."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    args: list[str] = []
    for param in group.commands[command].params:
        flag = param.opts[0]
        if flag in ("--db", "--out") or param.required:
            args += [flag, str(tmp / flag.strip("-"))]
    return args


def _gpulens(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["gpulens", *args])
    with pytest.raises(SystemExit) as exit_info:
        run()
    return int(exit_info.value.code or 0), capsys.readouterr().err


def test_the_walk_finds_the_number_flags_of_every_kind_of_command() -> None:
    found = set(number_flags())
    assert {("remediate", "--healthy-hours"), ("recommend", "--window-days"),
            ("recommend", "--borrowing-limit-ratio"), ("analyze", "--activity-threshold"), ("collect", "--days"),
            ("demo", "--days"), ("dashboard", "--port"), ("exporter", "--max-concurrent-requests")} <= found


@pytest.mark.timeout(60)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize(("command", "flag"), number_flags())
def test_a_number_flag_refuses_nan_and_infinity_by_its_name(
    command: str, flag: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = _gpulens([command, *_required(command, tmp_path), flag, value], monkeypatch, capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("gpulens: error: ") and flag in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize(("given", "message"), [
    (0.0, "--days: must be more than 0 days (got 0 days)"),
    (91.0, "--days: must be at most 90 days (got 91 days)"),
    (float("nan"), "--days: must be a finite number (got nan)"),
])
def test_the_shared_check_names_the_flag_and_its_bound_in_its_unit(given: float, message: str) -> None:
    with pytest.raises(UserError) as err:
        number(gt=0, le=90, unit="days")(DAYS, given)  # type: ignore[arg-type]
    assert str(err.value) == message


def test_the_shared_check_passes_a_value_within_bounds_and_an_unset_flag() -> None:
    check = number(gt=0, le=90, unit="days")
    assert check(DAYS, 0.5) == 0.5  # type: ignore[arg-type]
    assert check(DAYS, None) is None  # type: ignore[arg-type]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("args", "message"), [
    (["collect", "--simulate", "--days", "1e300"], "--days: must be at most 3660 days (got 1e+300 days)"),
    (["collect", "--simulate", "--days", "1e6"], "--days: must be at most 3660 days (got 1000000 days)"),
    (["recommend", "--history-days", "1e300"], "--history-days: must be at most 3660 days (got 1e+300 days)"),
    (["recommend", "--window-days", "1e300"], "--window-days: must be at most 3660 days (got 1e+300 days)"),
    (["recommend", "--min-cut-days", "-1"], "--min-cut-days: must be at least 0 days (got -1 days)"),
])
def test_a_days_flag_out_of_range_is_refused_by_its_name_in_days(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = _gpulens([*args, "--db", str(tmp_path / "missing.duckdb")], monkeypatch, capsys)
    assert (code, err.strip()) == (2, f"gpulens: error: {message}")
