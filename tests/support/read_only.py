"""Check that the readers of a shared, session-built fixture folder leave it exactly as it was built."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def fingerprint(folder: Path) -> dict[str, tuple[int, int]]:
    """Size and modification time of every file under ``folder``."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def changed_files(before: dict[str, tuple[int, int]], folder: Path) -> list[str]:
    """Files under ``folder`` written, added or removed since ``before`` was taken."""
    after = fingerprint(folder)
    return sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))


@contextmanager
def kept_read_only(folder: Path) -> Iterator[Path]:
    """Yield ``folder``; afterwards fail, naming the files, if a reader wrote to it (copy it to write)."""
    before = fingerprint(folder)
    yield folder
    changed = changed_files(before, folder)
    assert not changed, f"a test wrote to the shared fixture {folder} (copy it before writing): {changed}"
