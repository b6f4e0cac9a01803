"""The dcgm-exporter fields the collector ingests, under every name they have had, with the unit of each name.

Each field is declared once, by its pre-4.9 name and the unit dcgm-exporter served under that name; its
DCGM 4.7+ / dcgm-exporter 4.9+ name and that name's unit come from the generated table
(:mod:`collector.dcgm_names`), never typed a second time. A sample is converted to base units by the
name it was read under (:data:`READ_AS`): ``DCGM_FI_DEV_GPU_UTIL`` 42 (%) and
``DCGM_FI_DEV_GPU_UTIL_RATIO`` 0.42 become the same 0.42. A field whose new name is not in the table
(DCGM renamed it after the header the table came from) is read under its old name only.
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.dcgm_names import (
    DCGM_VERSION,
    EXPORTER_RENAMED,
    EXPORTER_RENAMED_IN,
    FIELD_IDS,
    NEW_NAME_UNITS,
    OTHER_ALIASES,
    RENAMED,
)

MIB = 1024 * 1024


@dataclass(frozen=True)
class Unit:
    """A unit a dcgm-exporter name is served in, and how it converts to its base unit."""

    name: str
    base: str
    scale: float
    """Multiply a value in this unit by ``scale`` for the base unit."""


UNITS: dict[str, Unit] = {u.name: u for u in (
    Unit("%", "ratio", 0.01),
    Unit("ratio", "ratio", 1.0),
    Unit("MiB", "bytes", float(MIB)),
    Unit("bytes", "bytes", 1.0),
    Unit("MHz", "Hz", 1e6),
    Unit("Hz", "Hz", 1.0),
    Unit("mJ", "J", 1e-3),
    Unit("J", "J", 1.0),
    Unit("W", "W", 1.0),
    Unit("degC", "degC", 1.0),
    Unit("MB/s", "B/s", 1e6),
    Unit("B/s", "B/s", 1.0),
    Unit("s", "s", 1.0),
    Unit("1", "1", 1.0),
)}
"""Every unit a field below is served in; ``1`` is a count, a code or a flag."""


@dataclass(frozen=True)
class DcgmField:
    """One field the collector ingests: its key in the mapping, its pre-4.9 name and that name's unit."""

    key: str
    legacy: str
    legacy_unit: str

    @property
    def new(self) -> str | None:
        """Its DCGM 4.7+ / dcgm-exporter 4.9+ name, from the generated table (``None``: not renamed there)."""
        return RENAMED.get(self.legacy) or EXPORTER_RENAMED.get(self.legacy)

    @property
    def new_unit(self) -> str | None:
        """The unit its new name states (a name that states none is a count, code or flag)."""
        return None if self.new is None else NEW_NAME_UNITS.get(self.new, "1")

    @property
    def names(self) -> tuple[str, ...]:
        """Every name it is read under: the pre-4.9 name first."""
        return (self.legacy,) if self.new is None else (self.legacy, self.new)

    def unit_of(self, name: str) -> Unit:
        """The unit of ``name`` (one of :attr:`names`)."""
        return UNITS[self.legacy_unit if name == self.legacy else str(self.new_unit)]


INGESTED: tuple[DcgmField, ...] = (
    DcgmField("gr_engine", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ratio"),
    DcgmField("sm_active", "DCGM_FI_PROF_SM_ACTIVE", "ratio"),
    DcgmField("gpu_util", "DCGM_FI_DEV_GPU_UTIL", "%"),
    DcgmField("fb_used", "DCGM_FI_DEV_FB_USED", "MiB"),
    DcgmField("fb_free", "DCGM_FI_DEV_FB_FREE", "MiB"),
    DcgmField("fb_reserved", "DCGM_FI_DEV_FB_RESERVED", "MiB"),
    DcgmField("fb_total", "DCGM_FI_DEV_FB_TOTAL", "MiB"),
    DcgmField("power", "DCGM_FI_DEV_POWER_USAGE", "W"),
    DcgmField("energy", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "mJ"),
    DcgmField("xid", "DCGM_FI_DEV_XID_ERRORS", "1"),
    DcgmField("temperature", "DCGM_FI_DEV_GPU_TEMP", "degC"),
    DcgmField("sm_clock", "DCGM_FI_DEV_SM_CLOCK", "MHz"),
    DcgmField("memory_clock", "DCGM_FI_DEV_MEM_CLOCK", "MHz"),
    DcgmField("row_remap_failed", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "1"),
    DcgmField("pcie_replay", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "1"),
    DcgmField("ecc_sbe", "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "1"),
    DcgmField("ecc_dbe", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "1"),
    DcgmField("retired_sbe", "DCGM_FI_DEV_RETIRED_SBE", "1"),
    DcgmField("retired_dbe", "DCGM_FI_DEV_RETIRED_DBE", "1"),
    DcgmField("nvlink_crc_flit", "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "1"),
)
"""What the mapping reads, by key; activity prefers the profiling fields (first two) to GPU_UTIL."""

BY_KEY: dict[str, DcgmField] = {f.key: f for f in INGESTED}

READ_AS: dict[str, tuple[DcgmField, Unit]] = {name: (f, f.unit_of(name)) for f in INGESTED for name in f.names}
"""Every name the collector ingests -> its field and the unit of that name."""

DCGM_METRICS: tuple[str, ...] = tuple(READ_AS)
"""dcgm-exporter series the collector reads (the Prometheus source queries exactly these)."""

LEGACY_DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"
NEW_DRIVER_LABEL = RENAMED[LEGACY_DRIVER_LABEL]
DRIVER_LABELS = (NEW_DRIVER_LABEL, LEGACY_DRIVER_LABEL)
"""The driver-version label under its 4.9+ name and its pre-4.9 name (either is accepted)."""

def _renamed_in(release: str) -> dict[str, str]:
    """Old name -> new name of the renames that dcgm-exporter ``release`` first serves."""
    out = {old: new for old, new in EXPORTER_RENAMED.items() if EXPORTER_RENAMED_IN[new] == release}
    return {**RENAMED, **out} if release == "4.9.0" else out


RENAMED_IN_4_9 = _renamed_in("4.9.0")
"""dcgm-exporter 4.9.0's renames (DCGM 4.7's naming standard): a target serving an old name is pre-4.9."""
RENAMED_IN_4_10 = _renamed_in("4.10.0")
"""dcgm-exporter 4.10.0's renames: its old names are still 4.9's."""

KNOWN_NAMES = frozenset(FIELD_IDS) | frozenset(RENAMED) | frozenset(OTHER_ALIASES) | frozenset(
    EXPORTER_RENAMED.values())
"""Every field name the table knows (current, renamed, aliased)."""

TABLE_SOURCE = f"DCGM {DCGM_VERSION} dcgm_fields.h"
