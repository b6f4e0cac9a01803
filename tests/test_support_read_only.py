"""The guard of the shared session fixtures: a reader leaves the folder as built, a writer is named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.read_only import kept_read_only


def built(tmp_path: Path) -> Path:
    (tmp_path / "report").mkdir()
    (tmp_path / "gpulens.duckdb").write_bytes(b"store")
    (tmp_path / "report" / "index.html").write_text("<html></html>")
    return tmp_path


def test_reading_the_shared_folder_passes(tmp_path: Path) -> None:
    with kept_read_only(built(tmp_path)) as folder:
        assert (folder / "gpulens.duckdb").read_bytes() == b"store"


@pytest.mark.parametrize(("change", "named"), [
    (lambda f: (f / "gpulens.duckdb").write_bytes(b"store"), "gpulens.duckdb"),  # same size, rewritten
    (lambda f: os.utime(f / "report" / "index.html", ns=(1, 1)), "report/index.html"),
    (lambda f: (f / "gpulens.duckdb.wal").write_bytes(b"w"), "gpulens.duckdb.wal"),
    (lambda f: (f / "report" / "index.html").unlink(), "report/index.html"),
])
def test_a_reader_that_writes_adds_or_removes_a_file_fails_naming_it(tmp_path: Path, change, named: str) -> None:  # type: ignore[no-untyped-def]
    folder = built(tmp_path)
    os.utime(folder / "gpulens.duckdb", ns=(10**9, 10**9))  # an mtime that a rewrite now certainly changes
    with pytest.raises(AssertionError, match="copy it before writing") as failed:
        with kept_read_only(folder):
            change(folder)
    assert named in str(failed.value)
