"""One power, two views: the simulated energy counter is the integral of exactly the power the gauge reports.

Over any window, on every simulated GPU, ``(energy(t2) - energy(t1)) / (t2 - t1)`` is the time-weighted
mean of the power gauge over the window (a GPU off the bus reports no power and adds no energy), for
live snapshots and for backfilled history; the counter never decreases, starts at 0 at the epoch, and
gives the same numbers whatever order or path reads it.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpulens.sim.faults import Schedule
from gpulens.sim.fleet import SimulatedFleet
from gpulens.sim.scenario import FaultKind, Scenario
from gpulens.sim.scenario_file import parse_scenario
from tests.support.sim_fleet import default_fleet, default_scenario

DAY = 86400.0
MINUTE = 60.0
JOULE_TOLERANCE = 0.0025
"""The counter is reported in millijoules: two readings round by at most 1 mJ together, plus float noise."""

# A node whose every edge falls off the minute: the epoch, the outage, the throttling window and the batch slots.
ODD_SCENARIO = """
name: odd-seconds
seed: 3
epoch: "2026-01-01T00:00:17.5Z"
pools:
  - {name: h100, gpu_model: H100, nodes: 1, sharing: exclusive}
tenants:
  - {name: a, namespaces: [{name: a}]}
workloads:
  - {name: train, tenant: a, archetype: training, pool: h100, pods: 1, devices_per_pod: 4}
  - {name: jobs, tenant: a, archetype: batch, pool: h100, pods: 4, slot_seconds: 1000.5, duty: 0.5}
faults:
  - {kind: xid79, node: h100-0, gpu: 1, at: 3630.25, every: 20000.5, duration: 95.25}
  - {kind: thermal, node: h100-0, gpu: 2, at: 7205.75, every: 30000.5, duration: 300.3}
"""


def odd_fleet() -> SimulatedFleet:
    return SimulatedFleet(parse_scenario(ODD_SCENARIO, origin="test"))


def _outage_edges(s: Scenario, node: str, t1: float, t2: float) -> list[float]:
    """Times in (t1, t2) where a GPU of ``node`` goes off or comes back on the bus (scheduled XID 79)."""
    edges = []
    for f in s.faults:
        if f.node == node and f.kind is FaultKind.XID79:
            sched = Schedule.of(f)
            for at in sched.occurrences(t1 - s.epoch_seconds - f.duration, t2 - s.epoch_seconds):
                edges += [at + s.epoch_seconds, at + s.epoch_seconds + f.duration]
    return [e for e in edges if t1 < e < t2]


def gauge_integral(fleet: SimulatedFleet, node: str, t1: float, t2: float) -> np.ndarray:
    """Joules per GPU under the power gauge over [t1, t2], read only through the gauge.

    The window is cut at every UTC minute and every outage edge; within each piece the gauge is read at
    its start and at its middle, checked to be the same reading (or absent at both), and weighted by the
    piece's length. Absent readings (GPU off the bus) add nothing.
    """
    cuts = np.unique(np.concatenate([
        [t1, t2], np.arange(math.floor(t1 / MINUTE) + 1, math.ceil(t2 / MINUTE)) * MINUTE,
        _outage_edges(fleet.scenario, node, t1, t2),
    ]))
    starts, lengths = cuts[:-1], np.diff(cuts)
    at_start = fleet.arrays(node, starts).power
    at_middle = fleet.arrays(node, starts + lengths / 2).power
    np.testing.assert_array_equal(at_start, at_middle, err_msg="the gauge changes within a minute")
    return np.nansum(at_start * lengths, axis=1)


def check_window(fleet: SimulatedFleet, node: str, t1: float, t2: float) -> int:
    """Assert the live counter's rise over [t1, t2] is the gauge's integral on every GPU; GPUs checked."""
    a, b = fleet.node_snapshot(node, t1), fleet.node_snapshot(node, t2)
    integral = gauge_integral(fleet, node, t1, t2)
    checked = 0
    for i, (ga, gb) in enumerate(zip(a.gpus, b.gpus, strict=True)):
        e1, e2 = ga.health.energy_joules, gb.health.energy_joules
        if e1 is None or e2 is None:  # off the bus at an end: the counter cannot be read then
            continue
        rate, mean_power = (e2 - e1) / (t2 - t1), integral[i] / (t2 - t1)
        assert abs(rate - mean_power) <= JOULE_TOLERANCE / (t2 - t1), (node, gb.index, t1, t2, rate, mean_power)
        checked += 1
    return checked


@settings(max_examples=25, deadline=None)
@given(
    node=st.sampled_from(default_fleet().node_names()),
    offset=st.floats(0.0, 30 * DAY, allow_nan=False),
    length=st.floats(0.25, 6 * 3600.0, allow_nan=False),
)
@example(node="gpu-h100-train-1", offset=3 * DAY - 600.5, length=3600.0)  # across the XID 79 outage of GPU 5
@example(node="gpu-h100-train-0", offset=DAY + 14 * 3600 - 300.25, length=3000.0)  # across thermal throttling
@example(node="gpu-h200-mig-0", offset=2 * DAY - 90.75, length=180.0)  # across a UTC midnight
@example(node="gpu-a100-mig-0", offset=0.0, length=150.5)  # the first minutes after the epoch
@example(node="gpu-h100-ts-0", offset=10 * DAY + 12.5, length=30.0)  # inside one minute
def test_live_energy_rises_by_the_integral_of_the_power_gauge_over_any_window(
    node: str, offset: float, length: float
) -> None:
    t1 = default_scenario().epoch_seconds + offset
    assert check_window(default_fleet(), node, t1, t1 + length) > 0


@settings(max_examples=20, deadline=None)
@given(offset=st.floats(0.0, 2 * DAY, allow_nan=False), length=st.floats(0.25, 4 * 3600.0, allow_nan=False))
@example(offset=3630.25 - 30.0, length=200.0)  # across the 95.25 s outage of GPU 1
@example(offset=7205.75 - 100.0, length=500.0)  # across the throttling window of GPU 2
@example(offset=0.0, length=75.0)  # the partial first minute after an epoch at :17.5
def test_live_energy_follows_the_gauge_when_every_edge_falls_inside_a_minute(offset: float, length: float) -> None:
    fleet = odd_fleet()
    t1 = fleet.scenario.epoch_seconds + offset
    assert check_window(fleet, "h100-0", t1, t1 + length) > 0


def _rises_match_the_gauge(h: pl.DataFrame, step: float) -> int:
    """Per GPU over history rows: between any two samples (GPU up at both), the counter's rise is the sum of
    power x step over the samples between them; that is, energy minus the running gauge integral is constant."""
    checked = 0
    for (_gpu,), rows in h.sort("ts").group_by("gpu_uuid"):
        power = rows["power_watts"].fill_null(0.0).to_numpy()
        running = np.concatenate([[0.0], np.cumsum(power * step)[:-1]])
        energy = rows["energy_joules"].to_numpy()
        up = rows["up"].to_numpy() & ~np.isnan(energy)
        residual = energy[up] - running[up]
        assert float(residual.max() - residual.min()) <= JOULE_TOLERANCE, _gpu
        checked += 1
    return checked


@settings(max_examples=8, deadline=None)
@given(
    day=st.integers(0, 25), minute=st.integers(0, 1439), step=st.sampled_from([15.0, 20.0, 30.0, 60.0]),
    hours=st.integers(1, 26),
)
@example(day=2, minute=23 * 60, step=60.0, hours=26)  # the XID 79 outage and the thermal window, across midnight
def test_backfilled_energy_rises_by_the_gauge_between_any_two_samples(
    day: int, minute: int, step: float, hours: int
) -> None:
    start = default_scenario().epoch_seconds + day * DAY + minute * MINUTE
    h = default_fleet().history(start, start + hours * 3600.0, step)
    assert _rises_match_the_gauge(h.gpu_samples, step) == h.gpu_samples["gpu_uuid"].n_unique()  # every GPU


def test_backfilled_energy_is_the_live_energy_and_stops_while_the_gpu_is_off_the_bus() -> None:
    fleet, s = default_fleet(), default_scenario()
    start = s.epoch_seconds + 3 * DAY - 3600
    uuid = fleet.node_plan("gpu-h100-train-1").gpus[5].uuid
    gpu5 = fleet.history(start, start + 3 * 3600, 60, nodes=["gpu-h100-train-1"]).gpu_samples.filter(
        pl.col("gpu_uuid") == uuid).sort("ts")
    assert gpu5["up"].sum() == 180 - 45  # the 45-minute outage at epoch + 3 days
    energy, power = gpu5["energy_joules"].to_numpy(), gpu5["power_watts"].to_numpy()
    # The last minute before the outage adds its power x 60 s; the 45 minutes off the bus add nothing.
    assert abs((energy[105] - energy[59]) - power[59] * 60) <= JOULE_TOLERANCE
    live = fleet.node_snapshot("gpu-h100-train-1", start + 105 * 60).gpus[5].health
    assert live.energy_joules == energy[105] and live.power_watts == power[105]


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(-600.0, 12 * DAY, allow_nan=False), min_size=2, max_size=40))
def test_the_counter_never_decreases_starts_at_zero_and_is_the_same_in_any_order(offsets: list[float]) -> None:
    s = default_scenario()
    times = s.epoch_seconds + np.array(offsets)
    fresh = SimulatedFleet(s)  # its own caches, read in the drawn order (not sorted)
    for node in ("gpu-h200-mig-0", "gpu-h100-train-1"):
        drawn = fresh.arrays(node, times).energy
        ordered = np.argsort(times, kind="stable")
        again = default_fleet().arrays(node, times[ordered]).energy
        np.testing.assert_array_equal(drawn[:, ordered], again)
        one_by_one = np.column_stack([fresh.arrays(node, [t]).energy[:, 0] for t in times[ordered]])
        np.testing.assert_array_equal(one_by_one, again)
        for row in again:
            up = row[~np.isnan(row)]
            assert (np.diff(up) >= 0).all()
        before_epoch = times[ordered] <= s.epoch_seconds
        assert (again[:, before_epoch] == 0).all()


def test_a_far_read_first_and_a_day_by_day_backfill_agree() -> None:
    """The per-day cache: reading 40 days out first, or every day up to it, gives the same counter."""
    s = default_scenario()
    t = s.epoch_seconds + 40 * DAY + 12345.5
    far_first = SimulatedFleet(s).arrays("gpu-h100-ts-0", [t]).energy
    stepwise = SimulatedFleet(s)
    for d in range(41):
        stepwise.arrays("gpu-h100-ts-0", [s.epoch_seconds + d * DAY + 1.0])
    np.testing.assert_array_equal(stepwise.arrays("gpu-h100-ts-0", [t]).energy, far_first)
