"""The file formats of the FOCUS chargeback export (``analyze --out``, the report's data files), by name.

Each format writes the same Arrow table of one run's chargeback rows to ``chargeback_focus.<suffix>``.
A new format is one :data:`FOCUS_FORMATS` entry: ``analyze --format`` lists and accepts it, and the
report links its file, without editing either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from analytics.csv_cells import safe_table
from gpulens.core.registry import Registry

if TYPE_CHECKING:
    import pyarrow as pa

STEM = "chargeback_focus"
"""Every format's file is ``<STEM>.<suffix>``."""


@dataclass(frozen=True)
class FocusFormat:
    """One export format: the file's suffix, what the report says the file holds, and the writer."""

    suffix: str
    holds: str
    write: Callable[[pa.Table, Path], None]

    def path(self, out_dir: Path) -> Path:
        return out_dir / f"{STEM}.{self.suffix}"


FOCUS_FORMATS: Registry[FocusFormat] = Registry("FOCUS format")


def _write_csv(table: pa.Table, path: Path) -> None:
    import pyarrow.csv as pa_csv

    pa_csv.write_csv(safe_table(table), path)  # tenant names must not run as spreadsheet formulas


def _write_parquet(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq

    pq.write_table(table, path)  # Parquet keeps the raw value


FOCUS_FORMATS.register("csv", "FOCUS 1.2 rows, spreadsheet-safe cells")(
    FocusFormat("csv", "FOCUS 1.2 cost and usage rows", _write_csv)
)
FOCUS_FORMATS.register("parquet", "the same rows, raw values")(
    FocusFormat("parquet", "the same rows as Parquet", _write_parquet)
)


def chosen(names: tuple[str, ...] | None) -> list[FocusFormat]:
    """The formats named (in registry order), every registered one when ``names`` is None."""
    wanted = FOCUS_FORMATS.names() if names is None else names
    return [FOCUS_FORMATS.load(n) for n in FOCUS_FORMATS.names() if n in wanted]
