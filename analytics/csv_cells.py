"""Spreadsheet-safe CSV cells: text a spreadsheet would run as a formula gets a leading apostrophe.

Tenant, namespace and queue names are chosen by tenants. A cell beginning with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return (or their full-width forms) is a formula to Excel, LibreOffice and
Google Sheets (OWASP "CSV injection"): ``=HYPERLINK(...)`` in a tenant name would run on the finance
team's machine. Only the CSV files change; Parquet and the store keep the raw value. Numeric columns
are not text and are never touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl
    import pyarrow as pa

FORMULA_STARTS = "=+-@\t\r\uff1d\uff0b\uff0d\uff20"
"""First characters that make a spreadsheet evaluate a cell (ASCII and full-width forms)."""
_PATTERN = "^([=+\\-@\\t\\r\uff1d\uff0b\uff0d\uff20])"
"""The same first characters as a regular expression (RE2 for pyarrow, Rust regex for polars)."""


def neutralise(text: str) -> str:
    """``text`` as a spreadsheet shows it literally: prefixed with ``'`` when it starts like a formula."""
    return f"'{text}" if text[:1] and text[0] in FORMULA_STARTS else text


def safe_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with every text cell neutralised (for ``write_csv`` only)."""
    import polars as pl

    text = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    return frame.with_columns(pl.col(text).str.replace(_PATTERN, "'$1")) if text else frame


def safe_table(table: pa.Table) -> pa.Table:
    """``table`` with every text cell neutralised (for ``pyarrow.csv.write_csv`` only)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for i, field in enumerate(table.schema):
        if pa.types.is_string(field.type) or pa.types.is_large_string(field.type) or pa.types.is_string_view(field.type):
            safe = pc.replace_substring_regex(table.column(i), pattern=_PATTERN, replacement="'\\1",
                                              max_replacements=1)
            table = table.set_column(i, field, safe)
    return table
