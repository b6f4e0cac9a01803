"""A store with a damaged data block (bytes overwritten on disk) is one line naming the store and saying to
restore it, for every command that reads it; the dashboard says so briefly, without a trace or a path."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboards.streamlit.launch import DB_ENV
from tests.support.cli import assert_one_line_error, gpulens
from tests.support.damaged_store import damage_table
from tests.support.report_store import build_store
from tests.support.streamlit_app import fresh_caches  # noqa: F401 (an autouse fixture)

APP = Path(__file__).resolve().parents[1] / "dashboards" / "streamlit" / "app.py"
DAMAGED = ("is damaged (the block at byte ", "fails its checksum): restore it from a backup")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A store of collected facts, and the same store after a real `gpulens analyze`."""
    tmp = tmp_path_factory.mktemp("damaged")
    facts = build_store(tmp / "facts.duckdb", with_results=False)
    analysed = tmp / "analysed.duckdb"
    shutil.copy(facts, analysed)
    proc = gpulens("analyze", "--db", str(analysed), "--window", "6h", timeout=300)
    assert proc.returncode == 0, proc.stderr
    return {"facts": facts, "analysed": analysed}


def _damaged(stores: dict[str, Path], which: str, table: str, tmp_path: Path) -> Path:
    copy = tmp_path / f"damaged-{which}.duckdb"
    shutil.copy(stores[which], copy)
    damage_table(copy, table)
    return copy


@pytest.mark.parametrize(("which", "table", "command"), [
    ("facts", "device_samples", ["analyze", "--window", "6h"]),
    ("analysed", "analysis_runs", ["report", "--out", "{tmp}/report"]),
    ("analysed", "chargeback", ["report", "--out", "{tmp}/report"]),
    ("facts", "device_samples", ["export-parquet", "--out", "{tmp}/parquet"]),
])
def test_a_damaged_block_read_by_a_command_is_one_line_naming_the_store_and_saying_restore_it(
    stores: dict[str, Path], which: str, table: str, command: list[str], tmp_path: Path
) -> None:
    db = _damaged(stores, which, table, tmp_path)
    proc = gpulens(*(a.format(tmp=tmp_path) for a in command), "--db", str(db), timeout=300)
    assert_one_line_error(proc, f"the store {db} ", *DAMAGED)


def test_the_dashboard_says_a_damaged_store_briefly_without_a_trace_or_the_servers_path(
    stores: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _damaged(stores, "analysed", "analysis_runs", tmp_path)
    monkeypatch.setenv(DB_ENV, str(db))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [e.value for e in at.error]
    assert shown == ["The store is damaged: the platform team has to restore it from a backup."]
    page = " ".join(str(e.value) for kind in ("error", "warning", "info", "text", "markdown", "caption")
                    for e in at.get(kind))
    assert str(tmp_path) not in page and "Traceback" not in page


def test_the_dashboard_is_served_with_no_error_details_for_the_browser() -> None:
    from dashboards.streamlit.launch import streamlit_command

    command = streamlit_command(Path("store.duckdb"), port=8501, host="127.0.0.1")
    assert command[command.index("--client.showErrorDetails") + 1] == "none"
