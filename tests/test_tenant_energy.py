"""Energy per tenant: the energy counter where it exists, power x time where only power is read, NULL where
neither is (never zero), shared by the GE each holder has on the GPU; CO2e at the stated grid intensity."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from analytics.tenant_energy import (
    DEFAULT_GRID_GCO2_PER_KWH,
    UNALLOCATED_ENERGY,
    TenantEnergy,
    co2e_kg,
    tenant_energy,
)
from tests.support.analytics_fleet import T0, Fleet

MINUTES = 60
END = T0 + timedelta(minutes=MINUTES)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(tmp_path / "s.duckdb")
    yield f
    f.close()


def _minutes(fleet: Fleet, gpu: str, *, joules_per_minute: float | None, watts: float | None,
             start_joules: float = 1e9) -> None:
    """One GPU sample a minute from T0 - 1 min (the reading before the window) to the window's end."""
    for i in range(-1, MINUTES):
        readings: dict[str, object] = {}
        if joules_per_minute is not None:
            readings["energy_joules"] = start_joules + (i + 1) * joules_per_minute
        if watts is not None:
            readings["power_watts"] = watts
        fleet.gpu_sample(gpu, T0 + timedelta(minutes=i), **readings)


def _energy(fleet: Fleet, grid: float = DEFAULT_GRID_GCO2_PER_KWH) -> dict[str, TenantEnergy]:
    return {e.account: e for e in tenant_energy(fleet.con, T0, END, grid)}


def test_the_energy_counter_wins_over_power_times_time_where_it_exists(fleet: Fleet) -> None:
    fleet.node("n1")
    fleet.gpu("GPU-1", "n1")
    fleet.alloc("GPU-1", "team-a", count=MINUTES)
    # The counter says 60 kJ a minute (1 kW); the power gauge says 700 W: the counter is the truth.
    _minutes(fleet, "GPU-1", joules_per_minute=60_000.0, watts=700.0)
    energy = _energy(fleet)
    assert energy["team-a"].energy_kwh == pytest.approx(1.0)
    assert energy["team-a"].counter_share == pytest.approx(1.0)
    assert energy["team-a"].energy_coverage == pytest.approx(1.0)


def test_power_times_time_stands_in_only_where_there_is_no_counter(fleet: Fleet) -> None:
    fleet.node("n1")
    fleet.gpu("GPU-1", "n1")
    fleet.alloc("GPU-1", "team-a", count=MINUTES)
    _minutes(fleet, "GPU-1", joules_per_minute=None, watts=500.0)
    energy = _energy(fleet)
    assert energy["team-a"].energy_kwh == pytest.approx(0.5)
    assert energy["team-a"].counter_share == pytest.approx(0.0)


def test_a_counter_that_goes_back_is_a_reset_not_negative_energy(fleet: Fleet) -> None:
    fleet.node("n1")
    fleet.gpu("GPU-1", "n1")
    fleet.alloc("GPU-1", "team-a", count=MINUTES)
    for i in range(-1, MINUTES):  # the driver reloads at minute 30: the counter starts again from 0
        joules = (1e9 + (i + 1) * 60_000.0) if i < 30 else (i - 30) * 60_000.0
        fleet.gpu_sample("GPU-1", T0 + timedelta(minutes=i), energy_joules=joules, power_watts=1000.0)
    energy = _energy(fleet)["team-a"]
    assert energy.energy_kwh == pytest.approx(1.0)  # the reset minute falls back to power x time
    assert energy.counter_share == pytest.approx(59 / 60)


def test_energy_is_shared_by_the_ge_each_holder_has_on_the_gpu_and_the_rest_is_unallocated(fleet: Fleet) -> None:
    fleet.node("n1", mode="mig")
    fleet.gpu("GPU-M", "n1", mode="mig")
    fleet.mig("MIG-3g", "GPU-M", "n1", "3g.71gb", gi=1)
    fleet.mig("MIG-1g", "GPU-M", "n1", "1g.18gb", gi=2)
    fleet.alloc("MIG-3g", "team-a", count=MINUTES, ge=3 / 7)
    fleet.alloc("MIG-1g", "team-b", count=MINUTES, ge=1 / 7)
    _minutes(fleet, "GPU-M", joules_per_minute=70_000.0, watts=None)  # 7/6 kWh over the hour
    energy = _energy(fleet)
    total = 70_000.0 * MINUTES / 3.6e6
    assert energy["team-a"].energy_kwh == pytest.approx(total * 3 / 7)
    assert energy["team-b"].energy_kwh == pytest.approx(total * 1 / 7)
    assert energy[UNALLOCATED_ENERGY].energy_kwh == pytest.approx(total * 3 / 7)
    assert sum(e.energy_kwh or 0.0 for e in energy.values()) == pytest.approx(total)


def test_a_tenant_whose_gpus_report_no_energy_has_null_kwh_and_null_co2e_never_zero(fleet: Fleet) -> None:
    fleet.node("n1")
    fleet.gpu("GPU-1", "n1")
    fleet.gpu("GPU-2", "n1")
    fleet.alloc("GPU-1", "team-a", count=MINUTES)
    fleet.alloc("GPU-2", "team-dark", count=MINUTES)
    _minutes(fleet, "GPU-1", joules_per_minute=60_000.0, watts=None)
    _minutes(fleet, "GPU-2", joules_per_minute=None, watts=None)  # up, but neither counter nor power
    energy = _energy(fleet)
    dark = energy["team-dark"]
    assert dark.energy_kwh is None
    assert dark.co2e_kg is None
    assert dark.energy_coverage == 0.0
    assert energy["team-a"].energy_kwh == pytest.approx(1.0)


def test_co2e_is_kwh_times_the_grid_intensity_given(fleet: Fleet) -> None:
    fleet.node("n1")
    fleet.gpu("GPU-1", "n1")
    fleet.alloc("GPU-1", "team-a", count=MINUTES)
    _minutes(fleet, "GPU-1", joules_per_minute=60_000.0, watts=None)
    assert _energy(fleet, grid=250.0)["team-a"].co2e_kg == pytest.approx(0.25)
    assert _energy(fleet)["team-a"].co2e_kg == pytest.approx(DEFAULT_GRID_GCO2_PER_KWH / 1000)
    assert co2e_kg(None, 250.0) is None


def test_a_gap_between_two_readings_is_not_energy_of_the_sample_after_it(fleet: Fleet) -> None:
    fleet.node("n1")
    fleet.gpu("GPU-1", "n1")
    fleet.alloc("GPU-1", "team-a", count=MINUTES)
    for i in [*range(-1, 20), *range(40, MINUTES)]:  # 20 minutes without samples
        fleet.gpu_sample("GPU-1", T0 + timedelta(minutes=i), energy_joules=1e9 + (i + 1) * 60_000.0)
    energy = _energy(fleet)["team-a"]
    assert energy.energy_kwh == pytest.approx(39 / 60)  # the 21 minutes up to minute 40 are not attributed
