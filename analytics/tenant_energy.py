"""Energy per tenant in kWh, from each GPU's energy counter, and its CO2e at a stated grid intensity.

Each GPU sample stands for the time since the GPU's previous sample: its energy is the counter's
increase over that time (``energy_joules``, NVML's total energy since the driver loaded) where both
readings exist and the counter did not go back (a reset), else power x time (``power_watts`` x the
time) where power is read, else **unmeasured** (NULL, never zero). A time longer than
:data:`MAX_GAP_FACTOR` x the fleet's usual sample interval is a gap, not a reading: nothing is
attributed across it. The energy of a GPU sample is shared between the holders at that sample's time
by the GPU-equivalents they hold on the GPU (a whole GPU 1, a MIG instance g/7, a time-sliced replica
1/replicas); what nobody holds is the fleet's ``__unallocated__`` energy.

A tenant's kWh is the sum over the samples where its GPUs' energy was measured; ``energy_coverage`` is
that measured share of its held GE-time, and a tenant with no measured held time has NULL kWh and NULL
CO2e. CO2e = kWh x grid intensity (gCO2e/kWh), location-based, one intensity for the fleet.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb

DEFAULT_GRID_GCO2_PER_KWH = 480.0
"""Default grid carbon intensity, gCO2e per kWh: the world's average electricity of 2023 (Ember, Global
Electricity Review 2024). Set your region's or your supplier's figure with ``--grid-gco2-per-kwh``."""
MAX_GAP_FACTOR = 2.5
"""A time between two samples of one GPU above this many usual sample intervals is a gap."""
UNALLOCATED_ENERGY = "__unallocated__"
"""The account of energy drawn while nobody held (that share of) the GPU."""
JOULES_PER_KWH = 3.6e6


@dataclass(frozen=True)
class TenantEnergy:
    """Energy of one account (tenant or ``__unallocated__``) over a window."""

    account: str
    energy_kwh: float | None
    """NULL when none of its held time had an energy reading."""
    energy_coverage: float | None
    """Share of its held GE-time whose energy was measured (0..1); NULL for ``__unallocated__``."""
    counter_share: float | None
    """Share of its measured energy read from the counter (the rest is power x time)."""
    co2e_kg: float | None
    """``energy_kwh`` x the grid intensity; NULL when the energy is."""


def co2e_kg(energy_kwh: float | None, grid_gco2_per_kwh: float) -> float | None:
    """CO2e in kg of ``energy_kwh`` at ``grid_gco2_per_kwh``; NULL energy gives NULL CO2e."""
    return None if energy_kwh is None else energy_kwh * grid_gco2_per_kwh / 1000.0


_ENERGY_SQL = """
WITH raw AS (
    SELECT gpu_uuid, ts, energy_joules, power_watts,
           lag(ts) OVER w AS prev_ts, lag(energy_joules) OVER w AS prev_joules
    FROM gpu_samples
    WHERE ts >= $start - to_seconds($lookback) AND ts < $end
    WINDOW w AS (PARTITION BY gpu_uuid ORDER BY ts)
),
spaced AS (SELECT *, epoch(ts) - epoch(prev_ts) AS dt FROM raw WHERE ts >= $start),
usual AS (SELECT coalesce(median(dt), 0) AS dt FROM spaced WHERE dt > 0),
reading AS (
    SELECT s.gpu_uuid, s.ts,
           CASE WHEN s.dt IS NULL OR s.dt <= 0 OR s.dt > u.dt * $gap_factor THEN NULL
                WHEN isfinite(s.energy_joules) AND isfinite(s.prev_joules) AND s.energy_joules >= s.prev_joules
                    THEN s.energy_joules - s.prev_joules
                WHEN isfinite(s.power_watts) AND s.power_watts >= 0 THEN s.power_watts * s.dt
           END AS joules,
           isfinite(s.energy_joules) AND isfinite(s.prev_joules) AND s.energy_joules >= s.prev_joules
               AND s.dt > 0 AND s.dt <= u.dt * $gap_factor AS from_counter,
           CASE WHEN s.dt > 0 AND s.dt <= u.dt * $gap_factor THEN s.dt ELSE u.dt END AS seconds
    FROM spaced s CROSS JOIN usual u
),
held AS (
    SELECT gpu_uuid, ts, tenant, sum(gpu_equivalents) AS ge
    FROM allocations WHERE ts >= $start AND ts < $end AND tenant IS NOT NULL
    GROUP BY ALL
),
scaled AS (  -- holders never take more than the whole GPU
    SELECT h.*, h.ge / greatest(sum(h.ge) OVER (PARTITION BY h.gpu_uuid, h.ts), 1.0) AS share FROM held h
),
shares AS (
    SELECT r.gpu_uuid, r.ts, r.joules, r.from_counter, r.seconds, h.tenant, h.share
    FROM reading r JOIN scaled h USING (gpu_uuid, ts)
    UNION ALL
    SELECT r.gpu_uuid, r.ts, r.joules, r.from_counter, r.seconds, NULL, 1.0 - coalesce(t.share, 0.0)
    FROM reading r LEFT JOIN (SELECT gpu_uuid, ts, sum(share) AS share FROM scaled GROUP BY ALL) t USING (gpu_uuid, ts)
)
SELECT tenant,
       sum(joules * share) AS joules,
       sum(share * seconds) FILTER (WHERE joules IS NOT NULL) AS measured,
       sum(share * seconds) AS held,
       sum(joules * share) FILTER (WHERE from_counter) AS counter_joules
FROM shares WHERE share > 0
GROUP BY tenant ORDER BY tenant NULLS LAST
"""


def tenant_energy(
    con: duckdb.DuckDBPyConnection, start: datetime, end: datetime, grid_gco2_per_kwh: float,
) -> list[TenantEnergy]:
    """Energy and CO2e per tenant (and ``__unallocated__``) over ``[start, end)`` from the store's
    ``gpu_samples`` and ``allocations`` (holders at each GPU sample's time)."""
    rows = con.execute(
        _ENERGY_SQL, {"start": start, "end": end, "lookback": 3600, "gap_factor": MAX_GAP_FACTOR},
    ).fetchall()
    out = []
    for tenant, joules, measured, held, counter_joules in rows:
        kwh = None if joules is None or not measured else float(joules) / JOULES_PER_KWH
        coverage = None if tenant is None or not held else float(measured or 0.0) / float(held)
        counter = None if kwh is None or not joules else float(counter_joules or 0.0) / float(joules)
        out.append(TenantEnergy(UNALLOCATED_ENERGY if tenant is None else str(tenant), kwh, coverage, counter,
                                co2e_kg(kwh, grid_gco2_per_kwh)))
    return out
