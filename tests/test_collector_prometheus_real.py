"""Against a REAL Prometheus: TSDB blocks built with promtool from known history (gpulens and dcgm-exporter
naming), collected through query_range, compared with the truth sample by sample."""

from __future__ import annotations

import time
from pathlib import Path

import polars as pl
import pytest

from collector.prometheus import HttpSettings, PrometheusClient, collect_range
from collector.store import Store
from gpulens.sim.fleet import SimulatedFleet
from gpulens.sim.scenario_file import load_scenario
from tests.support.prometheus import promtool, running_prometheus
from tests.support.store_render import render_openmetrics, series_for
from tests.support.synthetic_fleet import HOSTILE, synthetic_frames

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

STEP = 60.0
MINUTES = 90
# Recent enough that Prometheus's retention keeps the blocks; aligned to the hour for clean windows.
START = (time.time() // 3600) * 3600 - 4 * 3600
END = START + MINUTES * 60


@pytest.fixture(scope="module")
def synthetic() -> dict[str, pl.DataFrame]:
    """A small fleet whose every tenant string is hostile (quotes, backslash, newline, SQL, separators)."""
    return synthetic_frames(START, END, STEP, nodes=2, whole_gpus=1, hostile_tenant=True)


@pytest.fixture(scope="module", params=["synthetic", "simulated"])
def truth(request: pytest.FixtureRequest, synthetic: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """Known history: the synthetic fleet or the simulator's default fleet (all sharing modes, faults)."""
    if request.param == "synthetic":
        return synthetic
    return SimulatedFleet(load_scenario(None)).history(START, END, STEP).frames()


def _blocks(tmp: Path, truth: dict[str, pl.DataFrame], naming: str) -> Path:
    source = tmp / f"{naming}.om"
    source.write_text(render_openmetrics(series_for(truth, naming)), encoding="utf-8")  # type: ignore[arg-type]
    out = tmp / f"tsdb-{naming}"
    code, output = promtool("tsdb", "create-blocks-from", "openmetrics", str(source), str(out), timeout=120)
    assert code == 0, output
    return out


def _select(store: Store, table: str, columns: list[str], key: str) -> pl.DataFrame:
    return store.frame(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {key}, ts")  # noqa: S608 - test columns


def _collect(tmp: Path, tsdb: Path, schema: str, **kw: object) -> Store:
    args = ["--query.lookback-delta=30s", "--storage.tsdb.retention.time=100y"]
    store = Store(str(tmp / f"{schema}.duckdb"))
    with running_prometheus(data_dir=tmp / f"prom-{schema}", storage_path=tsdb, extra_args=args) as prom:
        with PrometheusClient(HttpSettings(prom.url)) as client:
            first = collect_range(store, client, start=START, end=END, step=STEP, schema=schema,  # type: ignore[arg-type]
                                  max_points=40, **kw)  # type: ignore[arg-type]
            assert len(first.windows) == 3
            # The same windows again add nothing, even when the bookkeeping is forgotten.
            store.con.execute("DELETE FROM ingest_batches")
            again = collect_range(store, client, start=START, end=END, step=STEP, schema=schema,  # type: ignore[arg-type]
                                  max_points=40, **kw)  # type: ignore[arg-type]
            assert again.rows == 0
    return store


def test_gpulens_history_through_prometheus_equals_the_truth(
    tmp_path: Path, truth: dict[str, pl.DataFrame], promtool_binary: str, prometheus_binary: str
) -> None:
    tsdb = _blocks(tmp_path, truth, "gpulens")
    with _collect(tmp_path, tsdb, "gpulens") as store:
        want = truth["device_samples"].drop("source").sort("device_id", "ts")
        got = _select(store, "device_samples", want.columns, "device_id")
        assert got.equals(want)
        want_g = truth["gpu_samples"].drop("source").sort("gpu_uuid", "ts")
        got_g = _select(store, "gpu_samples", want_g.columns, "gpu_uuid")
        assert got_g.equals(want_g)
        acols = [c for c in truth["allocations"].columns if c != "source"]
        keys = ["device_id", "ts", "namespace", "pod", "container"]
        want_a = truth["allocations"].select(acols).sort(keys)
        got_a = store.frame(f"SELECT {', '.join(acols)} FROM allocations").sort(keys)  # noqa: S608 - test columns
        assert got_a.equals(want_a)
        if HOSTILE in set(want_a["tenant"]):
            assert set(got_a["tenant"]) == {HOSTILE}, "quotes, backslash, newline and SQL survive end to end"
        assert store.count("gaps") == 0
        devices = store.frame("SELECT device_id, profile, gpu_equivalents FROM devices ORDER BY device_id")
        assert devices.equals(truth["devices"].select(devices.columns).sort("device_id"))


def _as_dcgm_sees_it(truth: dict[str, pl.DataFrame]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The truth's device rows as dcgm-exporter would report them: one entity per whole GPU or MIG GPU
    instance (its first compute instance), MIG devices named ``<GPU>/gi<id>``, rows with no reading gone."""
    devices = truth["devices"]
    first_ci = devices.sort("compute_instance_id", nulls_last=False).unique(
        ["gpu_uuid", "gpu_instance_id"], keep="first")
    dcgm_id = pl.when(pl.col("profile") != "gpu").then(
        pl.format("{}/gi{}", pl.col("gpu_uuid"), pl.col("gpu_instance_id"))).otherwise(pl.col("device_id"))
    id_map = first_ci.select("device_id", dcgm_id.alias("dcgm_id"))
    measured = pl.any_horizontal(pl.col(c).is_not_null() for c in
                                 ("activity_ratio", "memory_used_bytes", "memory_total_bytes"))
    samples = (truth["device_samples"].join(id_map, on="device_id").filter(measured)
               .with_columns(device_id=pl.col("dcgm_id")).drop("dcgm_id", "source").sort("device_id", "ts"))
    if "activity_signal" in samples.columns:  # dcgm-exporter's activity is its profiling field
        samples = samples.with_columns(activity_signal=pl.when(pl.col("activity_signal").is_not_null())
                                       .then(pl.lit("DCGM_FI_PROF_GR_ENGINE_ACTIVE")))
    return samples, id_map


def test_dcgm_history_through_prometheus_lands_in_the_same_tables(
    tmp_path: Path, truth: dict[str, pl.DataFrame], promtool_binary: str, prometheus_binary: str
) -> None:
    tsdb = _blocks(tmp_path, truth, "dcgm")
    with _collect(tmp_path, tsdb, "dcgm") as store:
        want, id_map = _as_dcgm_sees_it(truth)
        got = _select(store, "device_samples", want.columns, "device_id")
        assert got.equals(want)
        up = truth["gpu_samples"].filter(pl.col("up") & pl.col("power_watts").is_not_null())
        want_g = up.join(want.select("gpu_uuid", "ts").unique(), on=["gpu_uuid", "ts"]).sort("gpu_uuid", "ts")
        got_g = store.frame("SELECT * FROM gpu_samples ORDER BY gpu_uuid, ts")
        assert got_g["ts"].equals(want_g["ts"]) and got_g["gpu_uuid"].equals(want_g["gpu_uuid"])
        assert got_g["power_watts"].equals(want_g["power_watts"])
        assert got_g["temperature_celsius"].equals(want_g["temperature_celsius"])
        for col in ("energy_joules", "sm_clock_hz", "memory_clock_hz"):  # mJ and MHz back to J and Hz
            assert got_g[col].to_list() == pytest.approx(want_g[col].to_list(), rel=1e-12), col
        # One holder per entity (dcgm-exporter labels each series with one pod), tenant = namespace.
        holders = (truth["allocations"].join(id_map, on="device_id").sort("pod")
                   .unique(["dcgm_id", "ts"], keep="first").with_columns(device_id=pl.col("dcgm_id")))
        acols = ["ts", "node", "gpu_uuid", "device_id", "namespace", "pod", "container"]
        want_a = holders.select(acols).sort("device_id", "ts")
        got_a = _select(store, "allocations", acols, "device_id")
        assert got_a.equals(want_a)
        assert store.query("SELECT count(*) FROM allocations WHERE tenant <> namespace") == [(0,)]


def test_a_hostile_label_filter_selects_exactly_its_series(
    tmp_path: Path, synthetic: dict[str, pl.DataFrame], promtool_binary: str, prometheus_binary: str
) -> None:
    truth = synthetic
    tsdb = _blocks(tmp_path, truth, "gpulens")
    with _collect(tmp_path, tsdb, "gpulens", labels={"tenant": HOSTILE},
                  metrics=["gpulens_allocation_gpu_equivalents"]) as store:
        assert store.count("allocations") == truth["allocations"].height
    other = tmp_path / "other"
    other.mkdir()
    with _collect(other, tsdb, "gpulens", labels={"tenant": HOSTILE.replace("\n", " ")},
                  metrics=["gpulens_allocation_gpu_equivalents"]) as store:
        assert store.count("allocations") == 0
