"""Every gpulens command, given bad paths, unreadable files, bad durations and out-of-range numbers,
answers one line ``gpulens: error: ...`` and exit status 2, never a traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from tests.fakes.kubernetes_api import ANY, FakeKubernetesApi
from tests.support.cli import assert_one_line_error, gpulens
from tests.support.store_lock import store_held


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A real store, a plain file, a folder, a file that is not DuckDB, a DuckDB file that is not a gpulens
    store, and one that is not text."""
    tmp = tmp_path_factory.mktemp("bad-input")
    store = tmp / "store.duckdb"
    proc = gpulens("collect", "--simulate", "--days", "0.05", "--db", str(store))
    assert proc.returncode == 0, proc.stderr
    (tmp / "file.txt").write_text("a plain file\n", encoding="utf-8")
    (tmp / "folder").mkdir()
    (tmp / "not-a-store.duckdb").write_text("this is not a DuckDB file\n" * 200, encoding="utf-8")
    (tmp / "binary.yaml").write_bytes(b"\xff\xfe\x00 not yaml \x9c")
    with duckdb.connect(str(tmp / "other.duckdb")) as con:  # another application's database
        con.execute("CREATE TABLE orders (id INTEGER, amount DOUBLE)")
    return {
        "store": str(store),
        "file": str(tmp / "file.txt"),
        "under_file": str(tmp / "file.txt" / "sub"),
        "folder": str(tmp / "folder"),
        "foreign": str(tmp / "not-a-store.duckdb"),
        "other": str(tmp / "other.duckdb"),
        "binary": str(tmp / "binary.yaml"),
        "missing": str(tmp / "missing" / "x.duckdb"),
        "tmp": str(tmp),
    }


Case = Callable[[dict[str, str]], list[str]]

CASES: dict[str, tuple[Case, *tuple[str, ...]]] = {  # the arguments, then what the one error line holds
    # collect
    "collect --db in a missing folder": (
        lambda p: ["collect", "--simulate", "--days", "0.01", "--db", "/nonexistent/dir/x.duckdb"],
        "cannot open the store /nonexistent/dir/x.duckdb"),
    "collect --db under a file": (
        lambda p: ["collect", "--simulate", "--days", "0.01", "--db", p["under_file"]], "cannot open the store"),
    "collect --db a folder": (lambda p: ["collect", "--simulate", "--days", "0.01", "--db", p["folder"]],
                              "cannot open the store"),
    "collect --db not a store": (lambda p: ["collect", "--simulate", "--days", "0.01", "--db", p["foreign"]],
                                 "cannot open the store"),
    "collect --days negative": (lambda p: ["collect", "--simulate", "--days", "-1", "--db", p["store"]], "--days"),
    "collect --step bad": (lambda p: ["collect", "--simulate", "--step", "soon", "--db", p["store"]], "--step"),
    "collect --scenario missing": (
        lambda p: ["collect", "--simulate", "--scenario", p["missing"], "--db", p["store"]], "scenario"),
    "collect --scenario not yaml": (
        lambda p: ["collect", "--simulate", "--scenario", p["binary"], "--db", p["store"]], "scenario"),
    "collect --scenario a folder": (
        lambda p: ["collect", "--simulate", "--scenario", p["folder"], "--db", p["store"]], "scenario"),
    "collect --timeout bad": (
        lambda p: ["collect", "--scrape", "http://127.0.0.1:9/metrics", "--once", "--timeout", "0s",
                   "--db", p["store"]], "--timeout"),
    "collect --duration bad": (
        lambda p: ["collect", "--scrape", "http://127.0.0.1:9/metrics", "--duration", "1x", "--db", p["store"]],
        "--duration"),
    "collect --max-body-size bad": (
        lambda p: ["collect", "--scrape", "http://127.0.0.1:9/metrics", "--once", "--max-body-size", "lots",
                   "--db", p["store"]], "--max-body-size"),
    "collect --scrape not a url": (
        lambda p: ["collect", "--scrape", "127.0.0.1:9100", "--once", "--db", p["store"]], "--scrape"),
    "collect --retries negative": (
        lambda p: ["collect", "--prometheus", "http://127.0.0.1:9", "--start", "now-1h", "--retries", "-1",
                   "--db", p["store"]], "--retries"),
    "collect --bearer-token-file a folder": (
        lambda p: ["collect", "--prometheus", "http://127.0.0.1:9", "--start", "now-1h",
                   "--bearer-token-file", p["folder"], "--db", p["store"]], "bearer token file"),
    "collect --kubeconfig missing": (
        lambda p: ["collect", "--kubernetes", "--kubeconfig", p["missing"], "--db", p["store"]],
        "cannot load kubeconfig"),
    # export-parquet
    "export-parquet --out under a file": (
        lambda p: ["export-parquet", "--db", p["store"], "--out", p["under_file"]], "--out"),
    "export-parquet --db missing": (
        lambda p: ["export-parquet", "--db", p["missing"]], "no store at"),
    "export-parquet --db not a store": (
        lambda p: ["export-parquet", "--db", p["foreign"], "--out", p["tmp"] + "/pq"], "cannot open the store"),
    # demo
    "demo --out under a file": (lambda p: ["demo", "--out", p["under_file"], "--days", "0.1"], "--out"),
    "demo --step bad": (lambda p: ["demo", "--out", p["tmp"] + "/demo", "--step", "5 minutes"], "--step"),
    "demo --days out of range": (lambda p: ["demo", "--out", p["tmp"] + "/demo", "--days", "1000"], "--days"),
    "demo --scenario missing": (
        lambda p: ["demo", "--out", p["tmp"] + "/demo", "--scenario", p["missing"]], "scenario"),
    # analyze
    "analyze --db missing": (lambda p: ["analyze", "--db", p["missing"]], "no store at"),
    "analyze --db not a store": (lambda p: ["analyze", "--db", p["foreign"]], "cannot open the store"),
    "analyze --db a folder": (lambda p: ["analyze", "--db", p["folder"]], "no store at"),
    "analyze --window bad": (lambda p: ["analyze", "--db", p["store"], "--window", "14x"], "--window"),
    "analyze --bucket bad": (lambda p: ["analyze", "--db", p["store"], "--bucket", "7m"], "bucket"),
    "analyze --activity-threshold out of range": (
        lambda p: ["analyze", "--db", p["store"], "--activity-threshold", "2"], "threshold"),
    "analyze --prices missing": (lambda p: ["analyze", "--db", p["store"], "--prices", p["missing"]], "cannot read"),
    "analyze --config not yaml": (lambda p: ["analyze", "--db", p["store"], "--config", p["binary"]], ""),
    "analyze --out under a file": (
        lambda p: ["analyze", "--db", p["store"], "--out", p["under_file"]], "file.txt/sub: Not a directory"),
    # recommend
    "recommend --db missing": (lambda p: ["recommend", "--db", p["missing"]], "no store at"),
    "recommend --db not a store": (lambda p: ["recommend", "--db", p["foreign"]], "cannot open the store"),
    "recommend --percentile out of range": (
        lambda p: ["recommend", "--db", p["store"], "--percentile", "150", "--no-store"], "percentile"),
    "recommend --window-days negative": (
        lambda p: ["recommend", "--db", p["store"], "--window-days", "-3", "--no-store"], "window"),
    "recommend --out under a file": (
        lambda p: ["recommend", "--db", p["store"], "--out", p["under_file"], "--no-store"], "--out"),
    "recommend --db another application's DuckDB file": (
        lambda p: ["recommend", "--db", p["other"], "--no-store", "--out", p["tmp"] + "/rec"],
        "cannot read the store", "not a gpulens store"),
    # plan
    "plan --db not a store": (lambda p: ["plan", "--db", p["foreign"], "--out", p["tmp"] + "/plan"],
                              "cannot open the store", "not a valid DuckDB database file"),
    "plan --db another application's DuckDB file": (
        lambda p: ["plan", "--db", p["other"], "--no-store", "--out", p["tmp"] + "/plan"],
        "cannot read the store", "not a gpulens store"),
    # remediate
    "remediate --db not a store": (lambda p: ["remediate", "--db", p["foreign"], "--out", p["tmp"] + "/t"],
                                   "cannot open the store", "not a valid DuckDB database file"),
    "remediate --db another application's DuckDB file": (
        lambda p: ["remediate", "--db", p["other"], "--out", p["tmp"] + "/t"], "no health results"),
    # report
    "report --db missing": (lambda p: ["report", "--db", p["missing"], "--out", p["tmp"] + "/r"], "no store at"),
    "report --db not a store": (
        lambda p: ["report", "--db", p["foreign"], "--out", p["tmp"] + "/r"], "cannot open the store"),
    "report --out under a file": (lambda p: ["report", "--db", p["store"], "--out", p["under_file"]], ""),
    # dashboard
    "dashboard --db missing": (lambda p: ["dashboard", "--db", p["missing"]], "no store at"),
    "dashboard --port out of range": (lambda p: ["dashboard", "--db", p["store"], "--port", "70000"], "--port"),
    # exporter (each must fail before it serves)
    "exporter --interval bad": (lambda p: ["exporter", "--interval", "fast", "--listen", "127.0.0.1:0"], "--interval"),
    "exporter --listen bad port": (lambda p: ["exporter", "--listen", "127.0.0.1:99999"], "--listen"),
    "exporter --scenario missing": (
        lambda p: ["exporter", "--scenario", p["missing"], "--listen", "127.0.0.1:0"], "scenario"),
    "exporter --tls-cert-file a folder": (
        lambda p: ["exporter", "--tls-cert-file", p["folder"], "--tls-key-file", p["file"],
                   "--listen", "127.0.0.1:0"], ""),
    "exporter --basic-auth-file missing": (
        lambda p: ["exporter", "--basic-auth-file", p["missing"], "--listen", "127.0.0.1:0"], ""),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_to_any_command_is_one_line_and_exit_2(paths: dict[str, str], case: str) -> None:
    make_args, *fragments = CASES[case]
    proc = gpulens(*make_args(paths), timeout=60)
    assert_one_line_error(proc, *(f for f in fragments if f))


def test_a_missing_store_is_worded_the_same_by_every_command(paths: dict[str, str]) -> None:
    missing = paths["missing"]
    runs = [
        ["analyze", "--db", missing],
        ["report", "--db", missing, "--out", paths["tmp"] + "/r"],
        ["recommend", "--db", missing],
        ["export-parquet", "--db", missing, "--out", paths["tmp"] + "/pq"],
        ["dashboard", "--db", missing],
        ["prices", "show", "--db", missing],
        ["prices", "rules", "--db", missing, "--out", paths["tmp"] + "/rules.yaml"],
    ]
    want = f"gpulens: error: no store at {missing}: run `gpulens demo` or `gpulens collect --db {missing}` first"
    for args in runs:
        proc = gpulens(*args, timeout=60)
        assert_one_line_error(proc)
        assert proc.stderr.strip() == want, args


STORE_READERS: dict[str, Case] = {
    "analyze": lambda p: ["analyze", "--db", p["store"]],
    "recommend": lambda p: ["recommend", "--db", p["store"], "--out", p["tmp"] + "/rec"],
    "recommend --no-store": lambda p: ["recommend", "--db", p["store"], "--no-store", "--out", p["tmp"] + "/rec"],
    "plan": lambda p: ["plan", "--db", p["store"], "--out", p["tmp"] + "/plan"],
    "remediate": lambda p: ["remediate", "--db", p["store"], "--out", p["tmp"] + "/taints"],
    "report": lambda p: ["report", "--db", p["store"], "--out", p["tmp"] + "/report"],
    "export-parquet": lambda p: ["export-parquet", "--db", p["store"], "--out", p["tmp"] + "/pq"],
    "prices set": lambda p: ["prices", "set", "--db", p["store"], "--model", "H200", "--usd-per-gpu-hour", "4"],
    "prices show": lambda p: ["prices", "show", "--db", p["store"]],
}


def test_a_store_held_by_a_writer_is_the_same_retry_line_for_every_command(paths: dict[str, str]) -> None:
    store = paths["store"]
    with store_held(Path(store), seconds=120):
        procs = {name: gpulens(*args(paths), timeout=60) for name, args in STORE_READERS.items()}
    for name, proc in procs.items():
        assert_one_line_error(proc)
        assert proc.stderr.strip() == (
            f"gpulens: error: the store {store} is in use by another process (e.g. gpulens collect, analyze or "
            "report): try again when it has finished"), name


def test_an_api_server_that_never_answers_is_one_line_naming_the_request(tmp_path: Path) -> None:
    with FakeKubernetesApi() as api:
        api.hang(ANY, ANY, seconds=30, times=None)
        proc = gpulens("collect", "--kubernetes", "--kubeconfig", str(api.kubeconfig(tmp_path)), "--timeout", "1s",
                       "--db", str(tmp_path / "inventory.duckdb"), timeout=60)
    assert_one_line_error(proc, "Kubernetes inventory failed", "GET /api/v1/namespaces", "no answer within 1 s")
