"""Read-only store queries shared by the report and the Streamlit app."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from analytics.result_tables import append_run_rows
from dashboards.report import write_report
from dashboards.report.data import AnalysisMissing, StoreReader
from gpulens.core.errors import UserError
from tests.support.report_store import EVIL_TENANT, RUN_ID, build_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("store") / "gpulens.duckdb")


@pytest.fixture
def reader(store: Path) -> Iterator[StoreReader]:
    r = StoreReader.open(store)
    yield r
    r.close()


def test_capacity_states_average_the_ge_of_each_state_per_bucket(reader: StoreReader) -> None:
    frame = reader.capacity_states()
    assert frame.height == 6
    first = frame.row(0, named=True)
    assert first["allocated-active"] == pytest.approx(3 / 7 + 1)  # 3g slice + a whole A100
    assert first["allocated-idle"] == pytest.approx(2 / 7)  # two idle 1g slices
    assert first["unallocated"] == pytest.approx(1.0)  # the spare A100


def test_tenant_usage_lists_the_most_idle_tenants_first(reader: StoreReader) -> None:
    frame = reader.tenant_usage()
    assert frame["tenant"].to_list()[-1] == "vision"
    assert set(frame["tenant"].to_list()[:2]) == {"nlp", EVIL_TENANT}


def test_risk_terms_unpack_per_subject_and_scores_keep_subjects_without_terms(reader: StoreReader) -> None:
    terms = reader.isolation_terms("device")
    assert set(terms["term"].to_list()) == {"tenants_sharing_gpu", "no_network_policy"}
    scores = reader.isolation_scores("device")
    assert scores["subject"].to_list() == ["node-h200/GPU-h200-0", "node-a100/GPU-a100-0"]
    with pytest.raises(ValueError, match="scope"):
        reader.isolation_scores("cluster")


def test_health_lists_drain_candidates_first_with_readable_evidence(reader: StoreReader) -> None:
    health = reader.health()
    assert health["state"].to_list()[:2] == ["drain", "drain"]
    assert "XID 79" in " ".join(health["evidence"].to_list())


def test_tenant_controlled_strings_are_bound_parameters_not_sql(reader: StoreReader) -> None:
    assert reader.workload_series("x' OR '1'='1", "Job", "trainer").height == 0
    assert reader.workload_series("vision-train", "Job", "trainer").height == 6


def test_the_newest_analysis_run_wins(tmp_path: Path) -> None:
    path = build_store(tmp_path / "two-runs.duckdb")
    with duckdb.connect(str(path)) as con:
        con.execute(
            "INSERT INTO analysis_runs SELECT 'newer', window_start, window_end, bucket_seconds, sample_interval_seconds, "
            "parameters, fact_source, summary, created_at + INTERVAL 1 HOUR FROM analysis_runs WHERE run_id = ?",
            [RUN_ID],
        )
        rows = con.execute(
            "SELECT * REPLACE ('newer' AS run_id, ge_hours * 2 AS ge_hours) FROM idle_capacity WHERE run_id = ?",
            [RUN_ID],
        )
        names = [d[0] for d in rows.description]
        append_run_rows(con, "idle_capacity", [dict(zip(names, r, strict=True)) for r in rows.fetchall()])
    r = StoreReader.open(path)
    try:
        assert r.latest_run()["run_id"][0] == "newer"
        assert r.capacity_states().row(0, named=True)["unallocated"] == pytest.approx(2.0)
        assert r.health().height == 0  # the newer run wrote no health rows: never another run's rows
    finally:
        r.close()
    older = StoreReader.open(path, RUN_ID)
    try:
        assert older.capacity_states().row(0, named=True)["unallocated"] == pytest.approx(1.0)
        assert older.health().height == 3
    finally:
        older.close()


def test_a_result_table_that_was_never_written_names_the_command(tmp_path: Path) -> None:
    r = StoreReader.open(build_store(tmp_path / "raw.duckdb", with_results=False))
    try:
        with pytest.raises(AnalysisMissing, match="run `gpulens analyze --db"):
            r.tenant_usage()
        with pytest.raises(AnalysisMissing, match="run `gpulens recommend --db"):
            r.recommendations()
        assert r.recent_xids().height == 1  # facts still readable
    finally:
        r.close()


def test_a_file_that_is_not_a_store_is_refused_in_one_line(tmp_path: Path) -> None:
    other = tmp_path / "other.duckdb"
    with duckdb.connect(str(other)) as con:
        con.execute("CREATE TABLE t (a INTEGER)")
    r = StoreReader.open(other)
    try:
        with pytest.raises(UserError, match="is not a gpulens store"):
            r.overview()
    finally:
        r.close()
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_bytes(b"not a database at all" * 100)
    with pytest.raises(UserError, match="cannot open the store"):
        StoreReader.open(garbage)


def test_reading_never_modifies_the_store(store: Path, tmp_path: Path) -> None:
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    write_report(store, tmp_path / "out")
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before



def test_long_windows_are_averaged_into_at_most_max_points_buckets(reader: StoreReader) -> None:
    frame = reader.capacity_states(max_points=3)
    assert frame.height == 3
    assert [t.hour for t in frame["bucket"].to_list()] == [0, 2, 4]
    assert frame["unallocated"].to_list() == pytest.approx([1.0, 1.0, 1.0])


_WRITE = "import duckdb, sys; c = duckdb.connect(sys.argv[1]); c.execute('CREATE TABLE IF NOT EXISTS w (a INTEGER)'); c.close()"
_HOLD = (
    "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('holding', flush=True); time.sleep(30)"
)


def test_a_per_query_reader_never_keeps_a_writer_out(tmp_path: Path) -> None:
    path = build_store(tmp_path / "shared.duckdb")
    reader = StoreReader.per_query(path)
    assert reader.tenant_usage().height == 3
    proc = subprocess.run([sys.executable, "-c", _WRITE, str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr  # the app's reader did not hold the file lock
    assert reader.tenant_usage().height == 3


def test_a_store_locked_by_a_writer_is_a_clear_retry_message(tmp_path: Path) -> None:
    path = build_store(tmp_path / "busy.duckdb")
    reader = StoreReader.per_query(path)
    writer = subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "holding"
        with pytest.raises(UserError, match="in use by another process"):
            reader.tenant_usage()
    finally:
        writer.kill()
        writer.wait(timeout=30)
    assert reader.tenant_usage().height == 3


def test_run_calls_a_named_query_and_refuses_anything_else(store: Path) -> None:
    reader = StoreReader.per_query(store)
    assert reader.run("isolation_scores", scope="tenant")["subject"].to_list()[0] == EVIL_TENANT
    for bad in ("close", "_cursor", "nope"):
        with pytest.raises(ValueError, match="unknown store query"):
            reader.run(bad)


def test_every_named_query_exists_and_returns_a_frame(store: Path) -> None:
    reader = StoreReader.open(store)
    try:
        args = {"isolation_terms": {"scope": "device"}, "isolation_scores": {"scope": "device"},
                "workload_series": {"namespace": "vision-train", "kind": "Job", "name": "trainer"}}
        for name in sorted(StoreReader.QUERIES):
            assert reader.run(name, **args.get(name, {})).height > 0, name
    finally:
        reader.close()
