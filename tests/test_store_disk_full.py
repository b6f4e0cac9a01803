"""A full disk under the store, during `collect` and `analyze`, is one line naming the store and saying to free
space, never a traceback. The disk is a real small tmpfs the test mounts (it needs root)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pytest

from tests.support.cli import assert_one_line_error, gpulens
from tests.support.report_store import build_store

NO_SPACE = ("no space left on the device writing the store ", "free space there and run again")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """``mount(size_bytes)``: a fresh tmpfs of that size under ``tmp_path``; unmounted after the test."""
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            reason = f"cannot mount a tmpfs as root: {proc.stderr.strip() or proc.returncode}"
            if os.environ.get("CI") == "true":
                pytest.fail(reason)
            pytest.skip(reason)
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, check=False)


def test_a_full_disk_while_collecting_is_one_line_naming_the_store(small_disk: Callable[[int], Path]) -> None:
    db = small_disk(1024 * 1024) / "gpulens.duckdb"  # the schema fits; the first window's commit does not
    proc = gpulens("collect", "--simulate", "--days", "0.1", "--end", "2026-01-01T06:00:00Z", "--db", str(db),
                   timeout=300)
    assert_one_line_error(proc, f"{NO_SPACE[0]}{db}: {NO_SPACE[1]}")


def test_a_full_disk_while_analyzing_is_one_line_and_the_collected_facts_are_kept(
    tmp_path: Path, small_disk: Callable[[int], Path]
) -> None:
    facts = build_store(tmp_path / "facts.duckdb", with_results=False)
    disk = small_disk(facts.stat().st_size + 64 * 1024)  # the facts fit; the results do not
    db = disk / "gpulens.duckdb"
    shutil.copy(facts, db)
    proc = gpulens("analyze", "--db", str(db), "--window", "6h", timeout=300)
    assert_one_line_error(proc, f"{NO_SPACE[0]}{db}: {NO_SPACE[1]}")
    with duckdb.connect(str(facts), read_only=True) as con:
        before = con.execute("SELECT count(*) FROM device_samples").fetchone()
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM device_samples").fetchone() == before
