"""`gpulens analyze --config`: the file's settings stand; only a flag the user typed overrides one."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpulens.cli import app
from tests.support.analytics_fleet import Fleet


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("config") / "store.duckdb"
    f = Fleet(path)
    f.node("n1")
    f.gpu("GPU-A", "n1")
    f.samples("GPU-A", count=240, activity=0.5)  # 4 hours from T0 = 2026-01-05 00:00
    f.close()
    return path


def header(store: Path, tmp_path: Path, config_text: str, *flags: str) -> str:
    config = tmp_path / "analysis.yaml"
    config.write_text(config_text)
    result = CliRunner().invoke(app, ["analyze", "--db", str(store), "--config", str(config), *flags])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()[0]


FILE = "window_seconds: 2h\nbucket_seconds: 30m\nend: 2026-01-05T04:00:00Z\n"


def test_the_config_files_window_bucket_and_end_stand_when_no_flag_is_typed(store: Path, tmp_path: Path) -> None:
    line = header(store, tmp_path, FILE)
    assert "2026-01-05 02:00 .. 2026-01-05 04:00 UTC (30 min buckets" in line


def test_a_typed_flag_overrides_only_its_own_setting_of_the_config_file(store: Path, tmp_path: Path) -> None:
    line = header(store, tmp_path, FILE, "--window", "1h")
    assert "2026-01-05 03:00 .. 2026-01-05 04:00 UTC (30 min buckets" in line


def test_a_typed_flag_equal_to_its_default_still_overrides_the_config_file(store: Path, tmp_path: Path) -> None:
    line = header(store, tmp_path, FILE, "--bucket", "1h")
    assert "2026-01-05 02:00 .. 2026-01-05 04:00 UTC (60 min buckets" in line
