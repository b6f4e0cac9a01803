"""The built-in simulated scenario and its fleet, built once per test session (they are immutable)."""

from __future__ import annotations

from contextlib import ExitStack
from functools import cache

from exporter.server import serve_in_thread
from exporter.settings import ExporterSettings
from gpulens.sim.fleet import SimulatedFleet
from gpulens.sim.scenario import Scenario
from gpulens.sim.scenario_file import load_scenario


@cache
def default_scenario() -> Scenario:
    return load_scenario(None)


@cache
def default_fleet() -> SimulatedFleet:
    return SimulatedFleet(default_scenario())


def serve_fleet(stack: ExitStack, fleet: SimulatedFleet, at: float) -> list[str]:
    """One live exporter per node of ``fleet`` on loopback, frozen at virtual time ``at`` (closed with ``stack``);
    returns their /metrics URLs."""
    urls = []
    for node in fleet.node_names():
        source = fleet.source(node)
        handle = stack.enter_context(serve_in_thread(
            ExporterSettings(listen="127.0.0.1:0"), device_source=source, allocation_source=source,
            node=node, clock=lambda: at, background_cycle=False))
        urls.append(f"{handle.url}/metrics")
    return urls
