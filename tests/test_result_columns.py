"""Result rows given column-wise (``insert_columns``) are stored exactly as given, whatever path a column takes."""

from __future__ import annotations

import math
from datetime import datetime
from decimal import Decimal

import duckdb
import pytest

from analytics.result_tables import insert_columns


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (run VARCHAR, seen TIMESTAMP, cost DECIMAL(18,2), x DOUBLE, note VARCHAR)")
    return con


def rows(con: duckdb.DuckDBPyConnection) -> list[tuple[object, ...]]:
    return con.execute("SELECT * FROM t ORDER BY rowid").fetchall()


def test_a_column_of_one_value_is_stored_on_every_row(con: duckdb.DuckDBPyConnection) -> None:
    at = datetime(2026, 3, 2, 12, 0)
    insert_columns(con, "t", {"run": ["r1"] * 3, "seen": [at] * 3, "cost": [Decimal("1.50")] * 3,
                              "x": [2.0] * 3, "note": [None] * 3})
    assert rows(con) == [("r1", at, Decimal("1.50"), 2.0, None)] * 3


def test_columns_that_are_all_constant_still_give_one_row_per_value(con: duckdb.DuckDBPyConnection) -> None:
    insert_columns(con, "t", {"run": ["a", "a"], "seen": [None, None], "cost": [None, None], "x": [1.0, 1.0],
                              "note": ["n", "n"]})
    assert rows(con) == [("a", None, None, 1.0, "n")] * 2


def test_decimals_keep_their_exact_cents_and_none_stays_null(con: duckdb.DuckDBPyConnection) -> None:
    costs = [Decimal("0.01"), Decimal("123456789012.99"), None, Decimal("-7.10"), Decimal("1E+2")]
    insert_columns(con, "t", {"run": list("abcde"), "seen": [None] * 5, "cost": costs, "x": [0.0, 1, 2, 3, 4],
                              "note": list("vwxyz")})
    assert [r[2] for r in rows(con)] == costs


def test_a_nan_is_stored_as_null_in_a_mixed_or_a_constant_column(con: duckdb.DuckDBPyConnection) -> None:
    insert_columns(con, "t", {"run": ["a", "b"], "seen": [None, None], "cost": [None, None],
                              "x": [math.nan, 1.0], "note": ["n", None]})
    insert_columns(con, "t", {"run": ["c", "d"], "seen": [None, None], "cost": [None, None],
                              "x": [math.nan, math.nan], "note": ["n", "n"]})
    assert [(r[0], r[3], r[4]) for r in rows(con)] == [("a", None, "n"), ("b", 1.0, None), ("c", None, "n"),
                                                       ("d", None, "n")]


def test_tenant_strings_are_data_in_a_constant_column(con: duckdb.DuckDBPyConnection) -> None:
    hostile = "x'); DROP TABLE t; -- $c0 \"q\""
    insert_columns(con, "t", {"run": [hostile] * 2, "seen": [None] * 2, "cost": [None] * 2, "x": [1.0, 2.0],
                              "note": [hostile, "plain"]})
    assert [(r[0], r[4]) for r in rows(con)] == [(hostile, hostile), (hostile, "plain")]


def test_one_row(con: duckdb.DuckDBPyConnection) -> None:
    insert_columns(con, "t", {"run": ["r"], "seen": [None], "cost": [Decimal("2.00")], "x": [0.5], "note": ["n"]})
    assert rows(con) == [("r", None, Decimal("2.00"), 0.5, "n")]
