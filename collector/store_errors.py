"""The store's errors in the user's words, worded once for every command: missing, busy, cannot open, cannot
read, damaged, out of disk space.

DuckDB's exceptions stop here: code that opens or reads the store goes through :func:`connect_store` and
:func:`reading_store`, which turn a ``duckdb.Error`` into a :class:`StoreError` (a ``UserError``), so the
CLI never needs to know which library raised what.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from collector.schema_version import check_version
from gpulens.core.errors import UserError


class StoreError(UserError):
    """The store at a path cannot be used as asked; the message says why and what to do."""

    brief = "The store cannot be used right now: the server's log says why."


class StoreMissing(StoreError):
    """The store file does not exist (nothing was collected into it yet)."""

    brief = "There is no store yet: the platform team has to collect data first."

    def __init__(self, path: str | Path) -> None:
        super().__init__(f"no store at {path}: run `gpulens demo` or `gpulens collect --db {path}` first")


class StoreBusy(StoreError):
    """Another process holds the store's write lock (a collector, analyze, recommend)."""

    brief = "The store is being written by another process: reload the page in a moment."

    def __init__(self, path: str | Path) -> None:
        super().__init__(
            f"the store {path} is in use by another process (e.g. gpulens collect, analyze or report): "
            "try again when it has finished"
        )


class StoreUnavailable(StoreError):
    """The store file cannot be opened or created (bad directory, permissions, not a DuckDB file)."""

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"cannot open the store {path}: {reason}")


class StoreDamaged(StoreError):
    """A block of the store file fails its checksum (a damaged disk, a file changed by something else)."""

    brief = "The store is damaged: the platform team has to restore it from a backup."

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"the store {path} is damaged ({reason}): restore it from a backup, or collect into a new "
                         "store with --db")


class StoreNoSpace(StoreError):
    """A write to the store (or to a file a command writes while reading it) found its disk full."""

    brief = "The disk of the store is full: the platform team has to free space."

    def __init__(self, path: str | Path, written: str) -> None:
        where = f"the store {path}" if written == str(path) else f"{written} (reading the store {path})"
        super().__init__(f"no space left on the device writing {where}: free space there and run again "
                         "(what was committed before is kept)")


class StoreIOFailed(StoreError):
    """The operating system refused a read or write of the store file mid-way (disk, mount, permissions)."""

    brief = "The store's file cannot be read or written: the platform team has to check its disk."

    def __init__(self, path: str | Path, reason: str) -> None:
        super().__init__(f"reading or writing the store {path} failed: {reason}: check the path, its disk and "
                         "its permissions")


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


_WRITTEN = re.compile(r'Could not write file "([^"]+)"')
_BLOCK = re.compile(r"block at location (\d+)")


def storage_error(path: str | Path, exc: BaseException) -> StoreError | None:
    """The error for a DuckDB failure of the storage under a query (a damaged block, a full disk, an I/O
    error); ``None`` when ``exc`` is not one (a query's own error stays what it is)."""
    text = str(exc)
    low = text.lower()
    if "corrupt" in low or "checksum" in low:
        block = _BLOCK.search(text)
        return StoreDamaged(path, f"the block at byte {block.group(1)} fails its checksum" if block
                            else _first_line(exc))
    if "no space left on device" in low or "disk is full" in low or "disk full" in low:
        written = _WRITTEN.search(text)
        name = written.group(1) if written else str(path)
        return StoreNoSpace(path, str(path) if name.startswith(str(path)) else name)
    if isinstance(exc, duckdb.IOException) or "database has been invalidated" in low:
        return StoreIOFailed(path, _first_line(exc).removeprefix("IO Error: "))
    return None


@contextmanager
def storage_failures(path: str | Path) -> Iterator[None]:
    """Turn a failure of the store's storage inside the block (see :func:`storage_error`) into its
    :class:`StoreError`; any other DuckDB error passes unchanged."""
    try:
        yield
    except duckdb.Error as exc:
        error = storage_error(path, exc)
        if error is None:
            raise
        raise error from exc


def store_error(path: str | Path, exc: BaseException) -> StoreError:
    """The one-line error for a DuckDB failure to open the store at ``path``."""
    if is_lock_conflict(exc):
        return StoreBusy(path)
    damaged = storage_error(path, exc)
    if damaged is not None and not isinstance(damaged, StoreIOFailed):
        return damaged
    first = _first_line(exc)
    for prefix in ("IO Error: ", "IOException: "):
        first = first.removeprefix(prefix)
    first = first.replace(f'Cannot open file "{path}": ', "")
    return StoreUnavailable(path, first)


def read_error(path: str | Path, exc: BaseException) -> StoreError:
    """The one-line error for a DuckDB failure while reading (or writing results to) the open store."""
    if is_lock_conflict(exc):
        return StoreBusy(path)
    failed = storage_error(path, exc)
    if failed is not None:
        return failed
    if isinstance(exc, duckdb.CatalogException | duckdb.BinderException):
        return StoreUnreadable(path, f"not a gpulens store, or one from another version ({_first_line(exc)})")
    return StoreUnreadable(path, _first_line(exc))


def connect_store(path: str | Path, *, read_only: bool) -> duckdb.DuckDBPyConnection:
    """Open the existing store at ``path``: :class:`StoreMissing` when there is no such file, another
    :class:`StoreError` when DuckDB cannot open it (held by a writer, not a DuckDB file), and
    :class:`StoreVersionUnsupported` for a store from a newer or unknown schema version. DuckDB's progress
    bar is off: a long query must not print into a command's output."""
    path = Path(path)
    if not path.is_file():
        raise StoreMissing(path)
    try:
        con = duckdb.connect(str(path), read_only=read_only)
    except duckdb.Error as exc:
        raise store_error(path, exc) from exc
    try:
        with reading_store(path):
            con.execute("SET enable_progress_bar = false")
            check_version(con, path)
    except BaseException:
        con.close()
        raise
    return con


@contextmanager
def reading_store(path: str | Path) -> Iterator[None]:
    """Turn a DuckDB error raised by the block (a query on the store at ``path``) into a :class:`StoreError`."""
    try:
        yield
    except duckdb.Error as exc:
        raise read_error(path, exc) from exc
