"""The store's errors in the user's words, worded once for every command: missing, busy, cannot open."""

from __future__ import annotations

from pathlib import Path

from gpulens.core.errors import UserError


class StoreMissing(UserError):
    """The store file does not exist (nothing was collected into it yet)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"no store at {path}: run `gpulens demo` or `gpulens collect --db {path}` first")


class StoreBusy(UserError):
    """Another process holds the store's write lock (a collector, analyze, recommend)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(
            f"the store {path} is in use by another process (e.g. gpulens collect, analyze or report): "
            "try again when it has finished"
        )


class StoreUnavailable(UserError):
    """The store file cannot be opened or created (bad directory, permissions, not a DuckDB file)."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"cannot open the store {path}: {reason}")


def is_lock_conflict(exc: BaseException) -> bool:
    """True when DuckDB refused to open a file because another process holds its lock."""
    text = str(exc).lower()
    return "lock" in text and ("conflicting" in text or "could not set" in text)


def store_error(path: str | Path, exc: BaseException) -> UserError:
    """The one-line error for a DuckDB failure to open the store at ``path``."""
    if is_lock_conflict(exc):
        return StoreBusy(path)
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    for prefix in ("IO Error: ", "IOException: "):
        first = first.removeprefix(prefix)
    first = first.replace(f'Cannot open file "{path}": ', "")
    return StoreUnavailable(path, first)
