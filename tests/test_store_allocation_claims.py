"""Allocations are stored as claims: one row per run of samples in which a holder held a device unchanged.

The view ``allocations`` gives exactly the rows that were ingested, whatever the windows, their order or
repeats; an older store's per-sample table becomes claims in place, with a message; the Parquet export
writes claims cut at UTC midnights, and an export of per-sample rows (an earlier release) reads the same.
"""

from __future__ import annotations

import logging
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from collector.allocation_claims import DENSE_GRID, times_by_bucket_sql
from collector.backfill import backfill_simulated
from collector.parquet import export_parquet, read_fact_parquet
from collector.schema import connect, fact_columns
from collector.store import Store
from tests.support.run_rows import latest_run, run_rows

T0 = datetime(2026, 11, 30, 23, 0)
HOLDERS = (("ns-a", "train-0", "team-a", 1.0), ("ns-b", "serve-0", "team-b", 0.5), ("ns-b", "serve-1", "team-b", 0.5))


def sample_rows(samples: list[tuple[int, int, int]]) -> pl.DataFrame:
    """Allocation rows: (minute after T0, holder, share variant) each, on one shared GPU."""
    rows = [
        {"ts": T0 + timedelta(minutes=m), "node": "n1", "gpu_uuid": "GPU-1", "device_id": "GPU-1", "namespace": ns,
         "pod": pod, "container": "main", "tenant": tenant, "sharing_mode": "time-slicing",
         "gpu_equivalents": ge * (1 + v), "workload_kind": None, "workload_name": None, "source": "test"}
        for m, h, v in samples for ns, pod, tenant, ge in [HOLDERS[h]]
    ]
    return pl.DataFrame(rows, schema={c: (pl.Datetime("us") if c == "ts" else pl.Float64 if c == "gpu_equivalents"
                                          else pl.String) for c in fact_columns("allocations")})


def stored(con: duckdb.DuckDBPyConnection) -> list[tuple[object, ...]]:
    return con.execute("SELECT * FROM allocations ORDER BY ALL").fetchall()


def claims(con: duckdb.DuckDBPyConnection) -> list[tuple[object, ...]]:
    return con.execute("SELECT ts, last_ts, step_us, samples, pod, gpu_equivalents FROM allocation_claims "
                       "ORDER BY ALL").fetchall()


def ingest(store: Store, frame: pl.DataFrame, lo: int, hi: int) -> int:
    start, end = (T0.replace(tzinfo=UTC) + timedelta(minutes=m) for m in (lo, hi))
    result = store.ingest_window("test", start.timestamp(), end.timestamp(), {"allocations": frame})
    return result.rows.get("allocations", 0)


def test_a_holders_unchanged_samples_are_one_claim_and_a_change_or_a_missing_sample_starts_another(
    tmp_path: Path,
) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        samples = [(m, 0, 0) for m in range(10)]  # ten minutes unchanged
        samples += [(m, 0, 0) for m in range(12, 15)]  # minute 10 and 11 missing: a gap
        samples += [(m, 0, 1) for m in range(15, 18)]  # the share changed
        added = ingest(store, sample_rows(samples), 0, 18)
        assert added == 16
        assert claims(store.con) == [
            (T0, T0 + timedelta(minutes=9), 60_000_000, 10, "train-0", 1.0),
            (T0 + timedelta(minutes=12), T0 + timedelta(minutes=14), 60_000_000, 3, "train-0", 1.0),
            (T0 + timedelta(minutes=15), T0 + timedelta(minutes=17), 60_000_000, 3, "train-0", 2.0),
        ]
        assert stored(store.con) == sorted(sample_rows(samples).rows())


def test_the_next_window_extends_a_claim_and_the_same_window_again_adds_nothing(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        first, second = sample_rows([(m, 0, 0) for m in range(5)]), sample_rows([(m, 0, 0) for m in range(5, 9)])
        assert ingest(store, first, 0, 5) == 5
        assert ingest(store, second, 5, 9) == 4
        assert claims(store.con) == [(T0, T0 + timedelta(minutes=8), 60_000_000, 9, "train-0", 1.0)]
        assert ingest(store, second, 5, 9) == 0
        assert ingest(store, first, 0, 5) == 0
        assert claims(store.con) == [(T0, T0 + timedelta(minutes=8), 60_000_000, 9, "train-0", 1.0)]


def test_one_scrape_per_window_still_makes_one_claim(tmp_path: Path) -> None:
    """A collector that scrapes exporters stores one sample time per window: the second gives the step."""
    with Store(str(tmp_path / "s.duckdb")) as store:
        for m in range(6):
            ingest(store, sample_rows([(m, 1, 0), (m, 2, 0)]), m, m + 1)
        assert [c[2:] for c in claims(store.con)] == [(60_000_000, 6, "serve-0", 0.5), (60_000_000, 6, "serve-1", 0.5)]


windows = st.lists(st.integers(1, 59), unique=True, max_size=5).map(lambda cuts: [0, *sorted(cuts), 60])


@settings(max_examples=40, deadline=None)
@given(
    samples=st.lists(st.tuples(st.integers(0, 59), st.integers(0, 2), st.integers(0, 1)), max_size=90,
                     unique_by=lambda s: (s[0], s[1])),
    cuts=windows, order=st.randoms(use_true_random=False), repeat=st.booleans(),
)
def test_the_view_gives_exactly_the_rows_ingested_whatever_the_windows_their_order_and_repeats(
    tmp_path_factory: pytest.TempPathFactory, samples: list[tuple[int, int, int]], cuts: list[int],
    order: object, repeat: bool,
) -> None:
    spans = list(zip(cuts, cuts[1:], strict=False))
    order.shuffle(spans)  # type: ignore[attr-defined]
    with Store(str(tmp_path_factory.mktemp("claims") / "s.duckdb")) as store:
        for lo, hi in spans + (spans[:1] if repeat else []):
            ingest(store, sample_rows([s for s in samples if lo <= s[0] < hi]), lo, hi)
        assert stored(store.con) == sorted(sample_rows(samples).rows())
        count = store.con.execute("SELECT count(*) FROM allocation_claims").fetchall()[0][0]
        assert count <= len(samples)


def _v2_store(path: Path, frame: pl.DataFrame) -> None:
    """A store as schema version 2 wrote it: allocations a table of one row per sample."""
    with connect(str(path)) as con:
        con.execute("DROP VIEW allocations")
        con.execute("CREATE TABLE allocations AS SELECT * FROM frame")
        con.execute("DROP TABLE allocation_claims")
        con.execute("UPDATE schema_info SET value = '2' WHERE key = 'schema_version'")


def test_a_store_of_schema_version_2_is_migrated_in_place_with_a_message_and_the_same_rows(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    frame = sample_rows([(m, h, 0) for m in range(30) for h in (1, 2) if (m, h) != (20, 1)])
    _v2_store(tmp_path / "old.duckdb", frame)
    with caplog.at_level(logging.WARNING, logger="gpulens.store"), connect(str(tmp_path / "old.duckdb")) as con:
        assert stored(con) == sorted(frame.rows())
        assert con.execute("SELECT count(*) FROM allocation_claims").fetchall() == [(3,)]
        assert con.execute("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchall() == [("3",)]
    assert any("allocations are stored as claims" in r.getMessage() for r in caplog.records)


def test_the_parquet_export_cuts_claims_at_midnight_and_reads_back_the_same_rows(tmp_path: Path) -> None:
    frame = sample_rows([(m, 0, 0) for m in range(120)])  # 23:00 to 00:59: over midnight
    with Store(str(tmp_path / "s.duckdb")) as store:
        ingest(store, frame, 0, 120)
    export_parquet(str(tmp_path / "s.duckdb"), tmp_path / "pq")
    con = duckdb.connect()
    days = con.execute(
        f"SELECT date, ts, last_ts, samples FROM read_parquet('{tmp_path}/pq/allocations/**/*.parquet', "  # noqa: S608
        "hive_partitioning = true) ORDER BY ts"
    ).fetchall()
    assert [(str(d), s) for d, _, _, s in days] == [("2026-11-30", 60), ("2026-12-01", 60)]
    assert days[0][2] == datetime(2026, 11, 30, 23, 59) and days[1][1] == datetime(2026, 12, 1)
    rel = read_fact_parquet(con, tmp_path / "pq" / "allocations")
    assert rel is not None
    assert sorted(rel.fetchall()) == sorted(frame.rows())


def test_an_export_of_per_sample_rows_from_an_earlier_release_reads_the_same_rows(tmp_path: Path) -> None:
    frame = sample_rows([(m, h, 0) for m in range(20) for h in (0, 1)])
    folder = tmp_path / "pq" / "allocations"
    folder.parent.mkdir()
    con = duckdb.connect()
    con.execute(f"COPY (SELECT *, CAST(ts AS DATE) AS date FROM frame) TO '{folder}' "  # noqa: S608 - a test folder
                "(FORMAT parquet, PARTITION_BY (date))")
    rel = read_fact_parquet(con, folder)
    assert rel is not None
    assert sorted(rel.fetchall()) == sorted(frame.rows())


def test_every_analysis_gives_the_same_rows_from_claims_as_from_per_sample_rows(
    tmp_path: Path, simulated_store: Path,
) -> None:
    """The simulated fleet (shared GPUs, MIG, failures, gaps) analysed from the store's claims, from their
    Parquet export and from an export of one row per sample (an earlier release's) gives every row the same."""
    export_parquet(str(simulated_store), tmp_path / "claims-pq")
    shutil.copytree(tmp_path / "claims-pq", tmp_path / "per-sample-pq")
    shutil.rmtree(tmp_path / "per-sample-pq" / "allocations")
    with duckdb.connect(str(simulated_store), read_only=True) as con:
        folder = tmp_path / "per-sample-pq" / "allocations"
        con.execute(f"COPY (SELECT *, CAST(ts AS DATE) AS date FROM allocations) TO '{folder}' "  # noqa: S608
                    "(FORMAT parquet, PARTITION_BY (date))")
    got = {}
    for layout in ("store", "claims-pq", "per-sample-pq"):
        db = tmp_path / f"{layout}.duckdb"
        shutil.copy(simulated_store, db)
        parquet = {"parquet_dir": tmp_path / layout} if layout != "store" else {}
        analyze(db, AnalysisSettings.model_validate({"window_seconds": 2 * 86400, "end": END_OF_HISTORY, **parquet}))
        got[layout] = run_rows(db, latest_run(db))
        got[layout].pop("analysis_runs")  # its parameters name the folder
    assert got["claims-pq"] == got["store"]
    assert got["per-sample-pq"] == got["store"]
    assert sum(len(r) for r in got["store"].values()) > 1000


END_OF_HISTORY = datetime(2026, 11, 28)


@pytest.fixture(scope="module")
def simulated_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "gpulens.duckdb"
    end = END_OF_HISTORY.replace(tzinfo=UTC).timestamp()
    backfill_simulated(path, None, end - 2 * 86400, end, 300.0)
    return path


CLAIM_SPAN = (datetime(2026, 12, 1, 6, 0), datetime(2026, 12, 1, 12, 0))
"""Six hours from 06:00 UTC: a claim may begin up to six hours before the span (claims stay within their UTC day)."""


def within_the_day(t: int, step: int, n: int) -> tuple[int, int, int]:
    """A claim (first time after the span's start, step, samples) cut to its UTC day; a step of 0 is one sample."""
    return (t, step, 1) if step == 0 else (t, step, min(n, (18 * 3600 - 1 - t) // step + 1))


def claim_times_by_bucket(claims: list[tuple[int, int, int]], generated: bool,
                          dense_grid: int = DENSE_GRID) -> list[tuple[object, ...]]:
    """``times_by_bucket_sql`` of claims (first time in seconds after the span's start, step in seconds,
    samples), every claim generated time by time (``generated``) or summed by prefix where its grid holds
    ``dense_grid`` times per point (0: every grid)."""
    con = duckdb.connect()
    start, end = CLAIM_SPAN
    con.execute("CREATE TABLE claims (cid INTEGER, ts TIMESTAMP, last_ts TIMESTAMP, step_us BIGINT, samples INTEGER)")
    con.executemany("INSERT INTO claims VALUES (?, ?, ?, ?, ?)", [
        (i, start + timedelta(seconds=t), start + timedelta(seconds=t + step * (n - 1)), step * 1_000_000, n)
        for i, (t, step, n) in enumerate(claims)])
    sql = times_by_bucket_sql("claims", "CAST((epoch_us(s.ts) - $start_us) // $bs_us AS INTEGER)",
                              "AND true" if generated else "", dense_grid=dense_grid)
    start_us = (start - datetime(1970, 1, 1)) // timedelta(microseconds=1)
    return con.execute(f"SELECT * FROM ({sql}) ORDER BY ALL",  # noqa: S608 - our SQL
                       {"start": start, "end": end, "start_us": start_us, "bs_us": 3_600_000_000}).fetchall()


claim_shapes = st.lists(st.builds(within_the_day, st.integers(-6 * 3600, 7 * 3600),
                                  st.sampled_from([0, 30, 60, 60, 60, 300]), st.integers(1, 400)),
                        min_size=1, max_size=25)


@given(claim_shapes)
@settings(max_examples=60, deadline=None)
def test_claims_on_a_shared_grid_sum_their_times_per_bucket_exactly_as_their_generated_times(
    shapes: list[tuple[int, int, int]],
) -> None:
    """Per claim and bucket, the count, first and last time and hash sum of its times in the span are the same
    from prefix sums over a grid (every grid summed so, and the default rule) as from the times themselves:
    claims that begin before the span or end after it, one-sample claims, other steps and phases."""
    expected = claim_times_by_bucket(shapes, generated=True)
    assert claim_times_by_bucket(shapes, generated=False) == expected
    assert claim_times_by_bucket(shapes, generated=False, dense_grid=0) == expected


def test_a_whole_span_of_claims_on_one_clock_is_summed_by_prefix_with_the_same_sums() -> None:
    """Forty devices sampled on one clock all day (the shape prefix sums are for) and two claims off it: the
    same sums as their generated times, and every time in the span counted once."""
    shapes = [(-1800 + i, 60, 600) for i in range(0, 40 * 60, 60)] + [(17, 60, 200), (5, 0, 1)]
    rows = claim_times_by_bucket(shapes, generated=False)
    assert rows == claim_times_by_bucket(shapes, generated=True)
    in_span = sum(1 for t, step, n in shapes for k in range(n) if 0 <= t + step * k < 6 * 3600)
    assert sum(r[2] for r in rows) == in_span
