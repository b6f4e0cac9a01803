"""The collector scraping REAL in-process gpulens exporters of the simulated fleet: what lands in the store
equals the simulator's history at the same instant (the exporter -> collector contract, end to end)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import polars as pl

from collector.scrape import scrape_once
from collector.store import Store
from gpulens.sim.fleet import SimulatedFleet
from gpulens.sim.scenario_file import load_scenario
from tests.support.sim_fleet import serve_fleet

T = 1_790_000_000.0 - 1_790_000_000.0 % 60 + 12 * 3600  # an instant in virtual time


def test_scraping_every_node_of_the_fleet_stores_exactly_the_simulated_truth(tmp_path: Path) -> None:
    fleet = SimulatedFleet(load_scenario(None))
    db = tmp_path / "s.duckdb"
    with ExitStack() as stack:
        urls = serve_fleet(stack, fleet, T)
        summary = scrape_once(str(db), urls, clock=lambda: T)
    assert summary.errors == []
    truth = fleet.history(T, T + 60, 60.0).frames()
    with Store(str(db)) as store:
        for table, keys in (("device_samples", ["device_id", "ts"]), ("gpu_samples", ["gpu_uuid", "ts"]),
                            ("allocations", ["device_id", "ts", "namespace", "pod", "container"])):
            want = truth[table].drop("source").sort(keys)
            cols = ", ".join(want.columns)
            got = store.frame(f"SELECT {cols} FROM {table}").sort(keys)  # noqa: S608 - schema columns
            assert got.equals(want), table
        devices = store.frame("SELECT device_id, gpu_uuid, node, profile, gpu_equivalents FROM devices")
        assert devices.sort("device_id").equals(truth["devices"].select(devices.columns).sort("device_id"))
        tenants = {r[0] for r in store.query("SELECT DISTINCT tenant FROM allocations")}
        assert tenants == set(truth["allocations"]["tenant"].unique()) and len(tenants) > 1
        assert pl.Series(fleet.node_names()).sort().to_list() == sorted(
            r[0] for r in store.query("SELECT node FROM nodes"))
