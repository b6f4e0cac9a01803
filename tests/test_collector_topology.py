"""The exporter's topology series land in ``gpu_topology``: scraped or through Prometheus, NULL where unmeasured."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import polars as pl

from collector.exposition import parse_exposition
from collector.mapping import to_store_frames
from collector.prometheus import collect_range, metrics_for
from collector.scrape import scrape_once
from collector.store import Store
from gpulens.sim.fleet import SimulatedFleet
from gpulens.sim.scenario_file import load_scenario
from tests.support.sim_fleet import serve_fleet
from tests.support.synthetic_fleet import synthetic_frames
from tests.test_collector_prometheus import STEP, FakePrometheus, _client, fake_prometheus

T = 1_790_000_000.0 - 1_790_000_000.0 % 60 + 12 * 3600
MS = int(T * 1000)
COLUMNS = ["gpu_uuid", "node", "gpu_index", "numa_node", "cpu_affinity", "nvlink_domain", "nvlink_peers",
           "fabric_cluster_uuid", "fabric_clique_id"]

# A GB200-like node (fabric clique, peers on other nodes), a GPU still registering with the fabric manager,
# a GPU whose NUMA node the hardware did not give, and a GPU of an older exporter (no topology series at all).
TEXT = f"""\
gpulens_gpu_info{{node="nvl-0",gpu="GPU-a",index="0",model="GB200"}} 1 {MS}
gpulens_gpu_numa_info{{node="nvl-0",gpu="GPU-a",numa_node="0",cpu_affinity="0-71"}} 1 {MS}
gpulens_gpu_fabric_info{{node="nvl-0",gpu="GPU-a",cluster_uuid="c0ffee",clique_id="7",state="completed"}} 1 {MS}
gpulens_gpu_info{{node="nvl-0",gpu="GPU-b",index="1",model="GB200"}} 1 {MS}
gpulens_gpu_numa_info{{node="nvl-0",gpu="GPU-b",numa_node="",cpu_affinity=""}} 1 {MS}
gpulens_gpu_fabric_info{{node="nvl-0",gpu="GPU-b",cluster_uuid="c0ffee",clique_id="7",state="in_progress"}} 1 {MS}
gpulens_gpu_info{{node="pcie-0",gpu="GPU-c",index="0",model="A100"}} 1 {MS}
gpulens_gpu_peer_info{{node="pcie-0",gpu="GPU-c",peer_gpu="GPU-d",common_ancestor="single",p2p_nvlink="ok",nvlink_domain="pcie-0/nvlink-0"}} 1 {MS}
gpulens_gpu_peer_info{{node="pcie-0",gpu="GPU-c",peer_gpu="GPU-e",common_ancestor="system",p2p_nvlink="not_supported",nvlink_domain="pcie-0/nvlink-0"}} 1 {MS}
gpulens_gpu_info{{node="old-0",gpu="GPU-old",index="0",model="H100"}} 1 {MS}
"""


def _topology(text: str) -> dict[str, dict[str, object]]:
    frames = to_store_frames(parse_exposition(text), "gpulens", "scrape")
    return {r["gpu_uuid"]: r for r in frames["gpu_topology"].to_dicts()}


def test_every_topology_series_maps_to_its_column_and_silence_stays_null() -> None:
    rows = _topology(TEXT)
    assert set(rows) == {"GPU-a", "GPU-b", "GPU-c"}  # the older exporter's GPU: no row, unmeasured
    a, b, c = rows["GPU-a"], rows["GPU-b"], rows["GPU-c"]
    assert (a["numa_node"], a["cpu_affinity"], a["nvlink_domain"], a["fabric_clique_id"]) == (0, "0-71",
                                                                                             "fabric:c0ffee/7", 7)
    assert a["nvlink_peers"] is None  # no peer series: not "zero peers"
    assert (b["numa_node"], b["cpu_affinity"], b["nvlink_domain"], b["fabric_cluster_uuid"]) == (None, None, None,
                                                                                                None)
    assert (c["nvlink_domain"], c["nvlink_peers"], c["gpu_index"]) == ("pcie-0/nvlink-0", 1, 0)


def test_a_later_scrape_without_a_reading_keeps_the_measured_one(tmp_path: Path) -> None:
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.ingest_window("scrape", T, T + 60, to_store_frames(parse_exposition(TEXT), "gpulens", "scrape"))
        later = TEXT.replace(str(MS), str(MS + 60_000)).replace('numa_node="0",cpu_affinity="0-71"',
                                                                'numa_node="",cpu_affinity=""')
        store.ingest_window("scrape", T + 60, T + 120, to_store_frames(parse_exposition(later), "gpulens", "scrape"))
        assert store.query("SELECT numa_node, cpu_affinity FROM gpu_topology WHERE gpu_uuid = 'GPU-a'") == [(0, "0-71")]


def test_scraping_the_simulated_fleet_stores_the_simulators_topology(tmp_path: Path) -> None:
    fleet = SimulatedFleet(load_scenario(None))
    db = tmp_path / "s.duckdb"
    with ExitStack() as stack:
        urls = serve_fleet(stack, fleet, T)
        assert scrape_once(str(db), urls, clock=lambda: T).errors == []
    want = fleet.history(T, T + 60, 60.0).frames()["gpu_topology"].select(COLUMNS).sort("gpu_uuid")
    with Store(str(db)) as store:
        got = store.frame(f"SELECT {', '.join(COLUMNS)} FROM gpu_topology ORDER BY gpu_uuid")  # noqa: S608
    assert want.height > 0 and got.equals(want)


def test_the_prometheus_source_queries_and_stores_the_topology_series(tmp_path: Path) -> None:
    assert {"gpulens_gpu_numa_info", "gpulens_gpu_peer_info", "gpulens_gpu_fabric_info"} <= set(
        metrics_for("gpulens"))
    start = T - T % STEP
    truth = synthetic_frames(start, start + 600, STEP)
    fake = FakePrometheus(truth, extra_text=TEXT.replace(str(MS), str(int(start * 1000) + 60_000)))
    with fake_prometheus(fake) as url, Store(str(tmp_path / "p.duckdb")) as store, _client(url) as client:
        collect_range(store, client, start=start, end=start + 600, step=STEP, schema="gpulens")
        got = store.frame("SELECT gpu_uuid, numa_node, nvlink_domain, nvlink_peers FROM gpu_topology ORDER BY 1")
    assert got.equals(pl.DataFrame({
        "gpu_uuid": ["GPU-a", "GPU-b", "GPU-c"], "numa_node": [0, None, None],
        "nvlink_domain": ["fabric:c0ffee/7", None, "pcie-0/nvlink-0"], "nvlink_peers": [None, None, 1],
    }, schema={"gpu_uuid": pl.Utf8, "numa_node": pl.Int32, "nvlink_domain": pl.Utf8, "nvlink_peers": pl.Int32}))
