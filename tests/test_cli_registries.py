"""Named choices come from one registry per kind: a command's ``--help`` lists them and an unknown name
is refused with them, so a new entry appears in the CLI without editing the command.

- FOCUS export formats (``analyze --format``, ``analytics/focus_formats.py``);
- quota targets (``recommend --target``, ``analytics/quota_targets.py``);
- the chargeback's cost rules (``analyze --mig-proration``, ``--unallocated``, ``analytics/cost_rules.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
import typer
from typer.testing import CliRunner

from analytics.cost_rules import UNALLOCATED_SHARING
from analytics.focus_formats import FOCUS_FORMATS, FocusFormat
from analytics.quota_targets import QUOTA_TARGETS
from analytics.writers.resourcequota import ResourceQuotaTarget
from gpulens.cli.commands import analyze_cmd, recommend_cmd
from gpulens.core.errors import UserError
from gpulens.core.registry import Registry
from tests.support.analytics_fleet import T0, Fleet
from tests.support.cli import assert_one_line_error, gpulens


def _json_lines(table: pa.Table, path: Path) -> None:
    path.write_text("".join(json.dumps(row, default=str) + "\n" for row in table.to_pylist()))


@pytest.fixture
def jsonl() -> Iterator[str]:
    FOCUS_FORMATS.register("jsonl", "FOCUS rows as JSON lines")(FocusFormat("jsonl", "the rows as JSON lines", _json_lines))
    yield "jsonl"
    FOCUS_FORMATS.remove("jsonl")


@pytest.fixture
def volcano() -> Iterator[str]:
    QUOTA_TARGETS.add("volcano", "Volcano Queues", lambda: ResourceQuotaTarget)
    yield "volcano"
    QUOTA_TARGETS.remove("volcano")


def _cli(register: object) -> typer.Typer:
    """A fresh app with one command, registered now (after the test's entry), as ``gpulens`` does at start."""
    app = typer.Typer()
    register(app)  # type: ignore[operator]
    app.command("noop", hidden=True)(lambda: None)  # two commands: the command keeps its name
    return app


def _help(app: typer.Typer, command: str) -> str:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return " ".join(result.output.replace("│", " ").split())


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n1")
    f.gpu("GPU-A", "n1")
    f.samples("GPU-A", count=60, activity=0.5)
    f.alloc("GPU-A", "team-a", count=60)
    f.close()
    return path


def test_a_focus_format_added_to_the_registry_is_listed_and_written_by_analyze(tmp_path: Path, jsonl: str) -> None:
    app = _cli(analyze_cmd.register)
    assert "jsonl (FOCUS rows as JSON lines)" in _help(app, "analyze")
    out = tmp_path / "focus"
    end = (T0 + timedelta(hours=1)).isoformat()
    result = CliRunner().invoke(app, ["analyze", "--db", str(_store(tmp_path)), "--window", "1h", "--end", end,
                                      "--out", str(out), "--format", jsonl])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["chargeback_focus.jsonl"]
    rows = [json.loads(line) for line in (out / "chargeback_focus.jsonl").read_text().splitlines()]
    assert rows and {r["SubAccountName"] for r in rows} >= {"team-a"}


def test_an_unknown_focus_format_is_refused_with_the_registered_ones(tmp_path: Path, jsonl: str) -> None:
    result = CliRunner().invoke(_cli(analyze_cmd.register), ["analyze", "--db", str(tmp_path / "s.duckdb"),
                                                            "--out", str(tmp_path / "o"), "--format", "xlsx"])
    assert isinstance(result.exception, UserError)
    assert str(result.exception) == "invalid --format 'xlsx': use one of csv, parquet, jsonl"


def test_the_command_line_refuses_an_unknown_focus_format_on_one_line(tmp_path: Path) -> None:
    assert_one_line_error(gpulens("analyze", "--db", str(tmp_path / "s.duckdb"), "--out", str(tmp_path / "o"),
                                  "--format", "xlsx"),
                          "invalid --format 'xlsx': use one of csv, parquet")


def test_a_config_file_naming_an_unknown_focus_format_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "analysis.yaml"
    config.write_text("focus_formats: [csv, xlsx]\n")
    assert_one_line_error(gpulens("analyze", "--db", str(tmp_path / "s.duckdb"), "--config", str(config)),
                          "'xlsx' is not a FOCUS format: use one of csv, parquet")


def test_a_quota_target_added_to_the_registry_is_listed_and_accepted_by_recommend(tmp_path: Path, volcano: str) -> None:
    app = _cli(recommend_cmd.register)
    assert "volcano (Volcano Queues)" in _help(app, "recommend")
    db, out = str(tmp_path / "none.duckdb"), str(tmp_path / "o")
    refused = CliRunner().invoke(app, ["recommend", "--db", db, "--target", "nope", "--out", out])
    assert str(refused.exception) == "invalid --target 'nope': use one of kai, kueue, resourcequota, volcano, workloads"
    accepted = CliRunner().invoke(app, ["recommend", "--db", db, "--target", volcano, "--out", out])
    assert "no store at" in str(accepted.exception)  # past the choice of target, to the store


def test_a_name_is_registered_once() -> None:
    formats: Registry[int] = Registry("format")
    formats.add("csv", "rows", lambda: 1)
    with pytest.raises(ValueError, match="'csv' is registered twice"):
        formats.add("csv", "rows again", lambda: 2)


@pytest.fixture
def to_first_tenant() -> Iterator[str]:
    def rule(weights: Mapping[str, float]) -> Mapping[str, float]:
        return {min(weights): 1.0}

    UNALLOCATED_SHARING.add("to-first", "all of it to the first tenant by name", lambda: rule)
    yield "to-first"
    UNALLOCATED_SHARING.remove("to-first")


def _two_tenants_and_a_free_gpu(tmp_path: Path) -> Path:
    path = tmp_path / "store.duckdb"
    f = Fleet(path)
    f.node("n1")
    for gpu, tenant in (("GPU-A", "team-a"), ("GPU-B", "team-b"), ("GPU-C", None)):
        f.gpu(gpu, "n1")
        f.samples(gpu, count=60, activity=0.5)
        if tenant:
            f.alloc(gpu, tenant, count=60)
    f.close()
    return path


def test_a_cost_rule_added_to_the_registry_is_listed_and_decides_the_chargeback(
    tmp_path: Path, to_first_tenant: str
) -> None:
    app = _cli(analyze_cmd.register)
    assert "to-first (all of it to the first tenant by name)" in _help(app, "analyze")
    db = _two_tenants_and_a_free_gpu(tmp_path)
    end = (T0 + timedelta(hours=1)).isoformat()
    result = CliRunner().invoke(app, ["analyze", "--db", str(db), "--window", "1h", "--end", end,
                                      "--unallocated", to_first_tenant])
    assert result.exit_code == 0, result.output
    with duckdb.connect(str(db), read_only=True) as con:
        shared = con.execute("SELECT DISTINCT x_Tenant, x_UnallocatedPolicy FROM chargeback "
                             "WHERE x_CostState = 'shared-unallocated'").fetchall()
        own = con.execute("SELECT count(*) FROM chargeback WHERE SubAccountId = '__unallocated__'").fetchone()
    assert shared == [("team-a", "to-first")] and own == (0,)


def test_the_command_line_refuses_an_unknown_cost_rule_on_one_line(tmp_path: Path) -> None:
    assert_one_line_error(gpulens("analyze", "--db", str(tmp_path / "s.duckdb"), "--unallocated", "nope"),
                          "--unallocated: 'nope' is not a rule for unallocated cost: use one of own-line, even, "
                          "proportional")
    assert_one_line_error(gpulens("analyze", "--db", str(tmp_path / "s.duckdb"), "--mig-proration", "power"),
                          "--mig-proration: 'power' is not a MIG proration: use one of slices, memory")
