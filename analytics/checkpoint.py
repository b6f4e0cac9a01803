"""Checkpoint the store in the background while the run goes on in Python.

A run's day parts are committed before the window-level stages, which are mostly Python (one core).
Writing those parts from the write-ahead log into the database file (DuckDB's checkpoint, otherwise
done when the store is closed) is C++ work that needs no Python: it runs on a cursor of its own in a
thread meanwhile, so closing the store has only the run's own rows left to write.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

log = logging.getLogger(__name__)


@contextmanager
def background_checkpoint(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Checkpoint the database of ``con`` on another thread for the duration of the block; waits for it
    at the end. A checkpoint DuckDB cannot take now (another writer) is left to the close."""
    cursor = con.cursor()

    def run() -> None:
        try:
            cursor.execute("CHECKPOINT")
        except duckdb.Error as exc:  # e.g. a transaction of another client: the close checkpoints instead
            log.debug("background checkpoint not taken: %s", exc)

    worker = threading.Thread(target=run, name="gpulens-checkpoint", daemon=True)
    worker.start()
    try:
        yield
    finally:
        worker.join()
        cursor.close()
