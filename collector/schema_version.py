"""The store's schema version: the one this gpulens writes, the refusal of a store from a newer or unknown
version, and the explicit migrations of an older store (each one says what it changed).

A store records its version in ``schema_info`` (key ``schema_version``). Opening a store whose version is
newer than :data:`SCHEMA_VERSION`, or not a version at all, is refused before anything reads or writes
it: an older gpulens must never rewrite the marker of a newer store, nor read tables it does not know.
An older store is brought up to date by :func:`migrate`, which returns a sentence per change it made;
:mod:`collector.schema` logs them (logger ``gpulens.store``), and the command line prints them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import duckdb

from collector.allocation_claims import CLAIMS_TABLE, HOLDING, TIMING, claims_of_samples_sql
from gpulens.core import __version__
from gpulens.core.errors import UserError

SCHEMA_VERSION = 3
"""The schema version this gpulens writes and reads (older stores are migrated, newer ones refused)."""

log = logging.getLogger("gpulens.store")
"""Where migrations say what they changed (the command line prints its records as ``gpulens: note:``)."""


class StoreVersionUnsupported(UserError):
    """The store was written by a newer gpulens (or records a version that is not one): refused as it is."""

    brief = "The store was written by a newer gpulens: the platform team has to upgrade gpulens."

    def __init__(self, path: str | Path, found: str) -> None:
        what = f"schema version {found}" if found.isdigit() else f"an unknown schema version {found!r}"
        super().__init__(
            f"the store {path} has {what}; this gpulens ({__version__}) supports schema version "
            f"{SCHEMA_VERSION} and older: upgrade gpulens to use this store (it was left unchanged)"
        )


def has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether the connection's database has a table ``name`` (a view is not one)."""
    # fetchall, not fetchone: a result left unfinished blocks the connection's next relation query
    return bool(con.execute(
        "SELECT 1 FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'main' "
        "AND table_name = ?", [name],
    ).fetchall())


def stored_version(con: duckdb.DuckDBPyConnection) -> str | None:
    """The version the store records, as written; ``None`` for a new file or one without the marker."""
    if not has_table(con, "schema_info"):
        return None
    rows = con.execute("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchall()
    return str(rows[0][0]) if rows else None


def check_version(con: duckdb.DuckDBPyConnection, path: str | Path) -> None:
    """Refuse (:class:`StoreVersionUnsupported`) a store from a newer or unknown schema version."""
    found = stored_version(con)
    if found is None:
        return
    text = found.strip()
    if not text.isdigit() or int(text) > SCHEMA_VERSION:
        raise StoreVersionUnsupported(path, text)


@dataclass(frozen=True)
class Migration:
    """One change an older store needs: ``needed`` looks, ``sql`` changes; ``says`` is told the user."""

    says: str
    needed: Callable[[duckdb.DuckDBPyConnection], bool]
    sql: str


def _column_nullable(con: duckdb.DuckDBPyConnection, table: str, column: str) -> bool | None:
    rows = con.execute(
        "SELECT is_nullable FROM information_schema.columns "
        "WHERE table_name = ? AND column_name = ? AND table_schema = current_schema()",
        [table, column],
    ).fetchall()
    return rows[0][0] == "YES" if rows else None


_CLAIM_COLUMNS = ", ".join((*TIMING, *HOLDING))

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "pending_demand.quantity may now be unmeasured (NULL): pending workload counts without shapes are kept",
        lambda con: _column_nullable(con, "pending_demand", "quantity") is False,
        "ALTER TABLE pending_demand ALTER COLUMN quantity DROP NOT NULL",
    ),
    Migration(
        "device_samples gets the column activity_signal (NULL, not recorded, in the rows stored before)",
        lambda con: _column_nullable(con, "device_samples", "activity_signal") is None,
        "ALTER TABLE device_samples ADD COLUMN activity_signal VARCHAR",
    ),
    Migration(
        "the prices table becomes the price book (price_book): its rows are kept, with the source "
        "'store prices table' and no validity dates (schema version 2)",
        lambda con: _column_nullable(con, "prices", "gpu_model") is not None,
        "INSERT INTO price_book SELECT gpu_model, usd_per_gpu_hour, contracted_usd_per_gpu_hour, "
        "'store prices table', NULL, NULL, NULL, current_timestamp::TIMESTAMP FROM prices; DROP TABLE prices",
    ),
    Migration(
        "allocations are stored as claims (allocation_claims: one row per run of samples in which a holder held "
        "a device unchanged, instead of one per sample); the view allocations gives the same rows as before "
        "(schema version 3)",
        lambda con: has_table(con, "allocations"),
        f"INSERT INTO {CLAIMS_TABLE} ({_CLAIM_COLUMNS}) SELECT {_CLAIM_COLUMNS} FROM "  # noqa: S608 - our names
        f"({claims_of_samples_sql('allocations')}); DROP TABLE allocations",
    ),
)
"""What an older store is given, in order; each runs only where the store lacks it."""


def migrate(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Apply the migrations the store needs; one sentence per change made (none for a current store)."""
    done = []
    for migration in MIGRATIONS:
        if migration.needed(con):
            con.execute(migration.sql)
            done.append(migration.says)
    return done


def store_path(con: duckdb.DuckDBPyConnection) -> str:
    """The file the connection's database lives in (``memory`` for an in-memory one)."""
    rows = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    return str(rows[0][0]) if rows and rows[0][0] else "memory"
