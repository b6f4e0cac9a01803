"""A day is known by what its facts contain, not by its files' times, and a day computed again says why.

On two simulated days exported to date-partitioned Parquet (``gpulens export-parquet``):
- a copy of the Parquet folder with new modification times (a worker's copy) keeps every day;
- a file rewritten with other rows, its size and modification time kept, is a new day;
- a day computed again names what changed: its facts, a parameter, or the release that computed it.
"""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from analytics.day_parts import PART_VERSION
from analytics.run import analyze
from analytics.settings import AnalysisSettings
from collector.backfill import backfill_simulated
from collector.parquet import export_parquet

pytestmark = pytest.mark.slow

DAY = 86400
END = 1_790_000_000 - 1_790_000_000 % DAY  # a UTC midnight


def settings(parquet: Path, **kw: object) -> AnalysisSettings:
    return AnalysisSettings.model_validate({
        "window_seconds": 2 * DAY, "bucket_seconds": 3600, "parquet_dir": parquet,
        "end": datetime.fromtimestamp(END, UTC).replace(tzinfo=None), **kw})


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A store of two simulated days (15-minute samples) and its facts as Parquet, each day's device samples
    rewritten uncompressed and without dictionaries (so that a changed reading keeps the file's size)."""
    tmp = tmp_path_factory.mktemp("fingerprints")
    store = tmp / "gpulens.duckdb"
    backfill_simulated(store, None, END - 2 * DAY, END, 900.0)
    export_parquet(str(store), tmp / "parquet")
    for f in sorted((tmp / "parquet" / "device_samples").rglob("*.parquet")):
        pq.write_table(pq.read_table(f, partitioning=None), f, compression="none", use_dictionary=False)
    return store, tmp / "parquet"


def copy_store(store: Path, tmp: Path) -> Path:
    shutil.copy(store, tmp / "store.duckdb")
    return tmp / "store.duckdb"


def day_file(parquet: Path, day_offset: int) -> Path:
    day = datetime.fromtimestamp(END - (2 - day_offset) * DAY, UTC).date().isoformat()
    files = sorted((parquet / "device_samples" / f"date={day}").glob("*.parquet"))
    assert len(files) == 1, files
    return files[0]


def test_a_copy_with_new_modification_times_keeps_every_day(exported: tuple[Path, Path], tmp_path: Path) -> None:
    store, parquet = exported
    db = copy_store(store, tmp_path)
    first = analyze(db, settings(parquet))
    assert first.days_reused == 0 and set(first.days_computed.values()) == {"first analysed"}
    copied = tmp_path / "worker-copy"
    shutil.copytree(parquet, copied, copy_function=shutil.copyfile)  # bytes only: every file gets new times
    assert os.stat(day_file(copied, 0)).st_mtime_ns != os.stat(day_file(parquet, 0)).st_mtime_ns
    again = analyze(db, settings(copied))
    assert again.days_computed == {}
    assert again.days_reused == 2
    assert "days: 2 in the window, 2 reused, 0 computed" in again.render()


def test_a_file_rewritten_with_other_rows_at_the_same_size_and_time_is_a_new_day(
    exported: tuple[Path, Path], tmp_path: Path,
) -> None:
    store, original = exported
    parquet = tmp_path / "parquet"
    shutil.copytree(original, parquet)
    db = copy_store(store, tmp_path)
    analyze(db, settings(parquet))
    target = day_file(parquet, 1)
    before = os.stat(target)
    table = pq.read_table(target, partitioning=None)
    activity = table.column("activity_ratio").combine_chunks()
    i = next(k for k, v in enumerate(activity.to_pylist()) if v is not None and 0.2 < v < 0.8)
    changed = pc.if_else(pa.array([k == i for k in range(len(activity))]), pa.scalar(activity[i].as_py() / 2), activity)
    pq.write_table(table.set_column(table.schema.get_field_index("activity_ratio"), "activity_ratio", changed),
                   target, compression="none", use_dictionary=False)
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (os.stat(target).st_size, os.stat(target).st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    again = analyze(db, settings(parquet))
    second_day = datetime.fromtimestamp(END - DAY, UTC).date().isoformat()
    assert again.days_computed == {second_day: "its facts changed"}
    assert again.days_reused == 1
    assert f"  {second_day}: computed again: its facts changed" in again.render().splitlines()


def test_a_day_computed_again_names_the_parameter_or_the_release_that_changed(
    exported: tuple[Path, Path], tmp_path: Path,
) -> None:
    store, parquet = exported
    db = copy_store(store, tmp_path)
    analyze(db, settings(parquet))
    stricter = analyze(db, settings(parquet, activity_threshold=0.1))
    assert set(stricter.days_computed.values()) == {"threshold 0.05 -> 0.1"}
    with duckdb.connect(str(db)) as con:  # as an earlier release left them: another version, no longer found
        con.execute("""UPDATE analysis_parts SET part_id = 'old-' || part_id,
                       parameters = json_object('version', 6, 'threshold', 0.1)""")
    rerun = analyze(db, settings(parquet, activity_threshold=0.1))
    assert set(rerun.days_computed.values()) == {f"computed by another release (part version 6, now {PART_VERSION})"}
