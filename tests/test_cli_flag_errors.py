"""Flag errors name the flag the user typed, in the unit it takes, never a settings field."""

from __future__ import annotations

import re

import pytest
from pydantic import BaseModel, Field, ValidationError, field_validator

from gpulens.cli.flag_errors import Flag, describe_flag_errors, duration, percent
from tests.support.cli import assert_one_line_error, gpulens

FIELD_NAME = re.compile(r"\b[a-z]+_[a-z_]+\b")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("analyze", "--window", "14x"), "--window: not a duration (use 90s, 5m, 1.5h, 1h30m, 14d, 2w)"),
        (("analyze", "--activity-threshold", "1.5"), "--activity-threshold: must be at most 1 (got 1.5)"),
        (("analyze", "--memory-limit", "3"), "--memory-limit: '3' is not a size like 3GB, 1536MB or 512MiB"),
        (("recommend", "--percentile", "150"), "--percentile: must be at most 100 % (got 150 %)"),
        (("recommend", "--headroom", "-1"), "--headroom: must be at least 0 % (got -1 %)"),
        (("recommend", "--window-days", "0"), "--window-days: must be more than 0 days (got 0 days)"),
        (("exporter", "--interval", "5x"), "--interval: not a duration (use 500ms, 5s, 1m)"),
        (("exporter", "--tls-cert-file", "/tmp/c.pem"), "--tls-cert-file and --tls-key-file must be given together"),
    ],
)
def test_a_bad_flag_is_named_with_its_unit(args: tuple[str, ...], expected: str) -> None:
    command, *rest = args
    store = ("--db", "/nonexistent/store.duckdb") if command in ("analyze", "recommend") else ()
    proc = gpulens(command, *store, *rest)
    assert_one_line_error(proc, expected)
    assert not FIELD_NAME.search(proc.stderr.replace("--", "")), proc.stderr


class _Settings(BaseModel):
    window_seconds: int = 60
    percentile: float = Field(default=0.95, gt=0, le=1)
    nested_ratio: float = Field(default=0.5, ge=0, le=1)

    @field_validator("window_seconds", mode="before")
    @classmethod
    def _duration(cls, value: object) -> object:
        if isinstance(value, str):
            raise ValueError(f"not a duration: {value!r}")
        return value


FLAGS = {"window_seconds": duration("--window"), "percentile": percent("--percentile")}


def errors(**values: object) -> str:
    with pytest.raises(ValidationError) as info:
        _Settings.model_validate(values)
    return describe_flag_errors(info.value, FLAGS)


def test_bounds_are_converted_back_to_the_flags_unit() -> None:
    assert errors(percentile=1.5) == "--percentile: must be at most 100 % (got 150 %)"
    assert errors(percentile=0.0) == "--percentile: must be more than 0 % (got 0 %)"


def test_every_problem_is_reported_with_its_flag() -> None:
    assert errors(window_seconds="2 weeks", percentile=2.0) == (
        "--window: not a duration (use 90s, 5m, 1.5h, 1h30m, 14d, 2w); --percentile: must be at most 100 % (got 200 %)")


def test_a_field_no_flag_feeds_keeps_its_path() -> None:
    assert errors(nested_ratio=3) == "nested_ratio: should be less than or equal to 1"


def test_a_flag_number_is_shown_without_float_noise() -> None:
    assert Flag("--x", "%", 0.01).number(0.07) == "7 %"
    assert Flag("--y").number(1e-12) == "1e-12"
