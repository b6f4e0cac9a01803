"""The built-in simulated scenario and its fleet, built once per test session (they are immutable)."""

from __future__ import annotations

from functools import cache

from gpulens.exporter.sim.fleet import SimulatedFleet
from gpulens.exporter.sim.scenario import Scenario
from gpulens.exporter.sim.scenario_file import load_scenario


@cache
def default_scenario() -> Scenario:
    return load_scenario(None)


@cache
def default_fleet() -> SimulatedFleet:
    return SimulatedFleet(default_scenario())
