"""The store's errors in the user's words, worded once for every command: missing, busy, cannot open, cannot read.

DuckDB's exceptions stop here: code that opens or reads the store goes through :func:`connect_store` and
:func:`reading_store`, which turn a ``duckdb.Error`` into a :class:`StoreError` (a ``UserError``), so the
CLI never needs to know which library raised what.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from gpulens.core.errors import UserError


class StoreError(UserError):
    """The store at a path cannot be used as asked; the message says why and what to do."""


class StoreMissing(StoreError):
    """The store file does not exist (nothing was collected into it yet)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"no store at {path}: run `gpulens demo` or `gpulens collect --db {path}` first")


class StoreBusy(StoreError):
    """Another process holds the store's write lock (a collector, analyze, recommend)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(
            f"the store {path} is in use by another process (e.g. gpulens collect, analyze or report): "
            "try again when it has finished"
        )


class StoreUnavailable(StoreError):
    """The store file cannot be opened or created (bad directory, permissions, not a DuckDB file)."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"cannot open the store {path}: {reason}")


class StoreUnreadable(StoreError):
    """The file opened but a read failed: a DuckDB file that is not a gpulens store, or one that lacks
    tables or columns the command needs (an older schema), or a damaged file."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"cannot read the store {path}: {reason}")


def is_lock_conflict(exc: BaseException) -> bool:
    """True when DuckDB refused to open a file because another process holds its lock."""
    text = str(exc).lower()
    return "lock" in text and ("conflicting" in text or "could not set" in text)


def _first_line(exc: BaseException) -> str:
    """DuckDB's message without its continuation lines (hints, the SQL with a caret): the CLI prints one."""
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split()) if text else type(exc).__name__


def store_error(path: str | Path, exc: BaseException) -> StoreError:
    """The one-line error for a DuckDB failure to open the store at ``path``."""
    if is_lock_conflict(exc):
        return StoreBusy(path)
    first = _first_line(exc)
    for prefix in ("IO Error: ", "IOException: "):
        first = first.removeprefix(prefix)
    first = first.replace(f'Cannot open file "{path}": ', "")
    return StoreUnavailable(path, first)


def read_error(path: str | Path, exc: BaseException) -> StoreError:
    """The one-line error for a DuckDB failure while reading (or writing results to) the open store."""
    if is_lock_conflict(exc):
        return StoreBusy(path)
    if isinstance(exc, duckdb.CatalogException | duckdb.BinderException):
        return StoreUnreadable(path, f"not a gpulens store, or one from another version ({_first_line(exc)})")
    return StoreUnreadable(path, _first_line(exc))


def connect_store(path: str | Path, *, read_only: bool) -> duckdb.DuckDBPyConnection:
    """Open the existing store at ``path``: :class:`StoreMissing` when there is no such file, another
    :class:`StoreError` when DuckDB cannot open it (held by a writer, not a DuckDB file)."""
    path = Path(path)
    if not path.is_file():
        raise StoreMissing(path)
    try:
        return duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        raise store_error(path, exc) from exc


@contextmanager
def reading_store(path: str | Path) -> Iterator[None]:
    """Turn a DuckDB error raised by the block (a query on the store at ``path``) into a :class:`StoreError`."""
    try:
        yield
    except duckdb.Error as exc:
        raise read_error(path, exc) from exc
