"""A simulator scenario's epoch lies in a sane range: one far in the past (whose counters would be integrated
over every day since) is refused at once, by the file and field, instead of keeping a command busy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpulens.core.errors import UserError
from gpulens.sim.scenario import DEFAULT_SCENARIO_PATH
from gpulens.sim.scenario_file import parse_scenario
from tests.support.cli import assert_one_line_error, gpulens


def _with_epoch(epoch: str) -> str:
    text = Path(DEFAULT_SCENARIO_PATH).read_text(encoding="utf-8")
    changed, n = re.subn(r"(?m)^epoch: .*$", f'epoch: "{epoch}"', text)
    assert n == 1
    return changed


@pytest.mark.timeout(120)
def test_collect_simulate_refuses_an_epoch_of_year_one_at_once(tmp_path: Path) -> None:
    scenario = tmp_path / "year-one.yaml"
    scenario.write_text(_with_epoch("0001-01-01"), encoding="utf-8")
    proc = gpulens("collect", "--simulate", "--days", "0.01", "--scenario", str(scenario),
                   "--db", str(tmp_path / "s.duckdb"), timeout=90)
    assert_one_line_error(proc, f"{scenario}: epoch: must be from 2020-01-01 to before 2100-01-01 (got 0001-01-01)")


@pytest.mark.parametrize("epoch", ["2019-12-31T23:59:59Z", "2100-01-01T00:00:00Z", "9999-12-31"])
def test_an_epoch_outside_the_range_is_refused_by_the_file_and_field(epoch: str) -> None:
    with pytest.raises(UserError, match=r"^fleet\.yaml: epoch: must be from 2020-01-01 to before 2100-01-01"):
        parse_scenario(_with_epoch(epoch), origin="fleet.yaml")


@pytest.mark.parametrize("epoch", ["2020-01-01T00:00:00Z", "2026-01-01T00:00:17.5Z", "2099-12-31T23:59:59Z"])
def test_an_epoch_inside_the_range_is_kept(epoch: str) -> None:
    assert parse_scenario(_with_epoch(epoch), origin="fleet.yaml").epoch.year in (2020, 2026, 2099)
