"""The metric catalog: name, type, unit, labels and help of every series the gpulens exporter emits.

Defined once here (the metrics contract, docs/metrics.md): the Prometheus exposition builds its families from these
entries, the OTel instruments take their names and descriptions from them, the collector reads the
series they name, the Grafana dashboards spell their PromQL with them, and a test holds
``docs/metrics.md`` to them. A name is spelled nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

PREFIX = "gpulens_"
"""The one documented prefix of every gpulens series."""


class MetricType(StrEnum):
    """Prometheus metric types the exporter uses."""

    GAUGE = "gauge"
    COUNTER = "counter"


class MetricGroup(StrEnum):
    """What a series describes (the sections of ``docs/metrics.md``)."""

    GPU = "gpu"
    """One series per physical GPU (identity, health, physical readings)."""
    TOPOLOGY = "topology"
    """NUMA, NVLink, peer and fabric information of a GPU."""
    DEVICE = "device"
    """One series per allocatable device (whole GPU or MIG instance)."""
    ALLOCATION = "allocation"
    """One series per container holding a device."""
    TENANT = "tenant"
    """Per-tenant node aggregates."""
    EXPORTER = "exporter"
    """The exporter's own health."""


class OtelKind(StrEnum):
    """OpenTelemetry observable instrument kinds."""

    GAUGE = "gauge"
    COUNTER = "counter"
    UP_DOWN_COUNTER = "up_down_counter"


@dataclass(frozen=True)
class OtelInstrument:
    """How a series is exported over OTLP: semantic-convention name, instrument kind and UCUM unit."""

    name: str
    kind: OtelKind
    unit: str
    description: str | None = None
    """Set only where the OTel instrument says something else than the series' help."""


@dataclass(frozen=True)
class MetricSpec:
    """One series of the exporter, as Prometheus sees it (``name`` ends in ``_total`` for a counter)."""

    name: str
    type: MetricType
    unit: str
    """The unit in words, as ``docs/metrics.md`` lists it (``1`` for info-style and 0/1 series)."""
    labels: tuple[str, ...]
    help: str
    group: MetricGroup
    otel: OtelInstrument | None = None

    def __post_init__(self) -> None:
        if not self.name.startswith(PREFIX):
            raise ValueError(f"{self.name}: every gpulens series starts with {PREFIX}")
        if (self.type is MetricType.COUNTER) != self.name.endswith("_total"):
            raise ValueError(f"{self.name}: counters, and only counters, end in _total")

    @property
    def family_name(self) -> str:
        """The family name prometheus_client expects (a counter without its ``_total``)."""
        return self.name.removesuffix("_total") if self.type is MetricType.COUNTER else self.name

    @property
    def otel_description(self) -> str:
        """The OTel instrument's description: its own where it has one, else the help without the full stop."""
        if self.otel is not None and self.otel.description is not None:
            return self.otel.description
        return self.help.removesuffix(".")


_NG = ("node", "gpu")
_MEMORY = ("node", "gpu", "device", "profile", "gpu_instance")
_TENANT = ("node", "tenant", "profile")
G, C = MetricType.GAUGE, MetricType.COUNTER
_GPU, _TOPO, _DEV = MetricGroup.GPU, MetricGroup.TOPOLOGY, MetricGroup.DEVICE
_ALLOC, _TEN, _EXP = MetricGroup.ALLOCATION, MetricGroup.TENANT, MetricGroup.EXPORTER
_OG, _OC, _OU = OtelKind.GAUGE, OtelKind.COUNTER, OtelKind.UP_DOWN_COUNTER

# -- per physical GPU ----------------------------------------------------------------------------
GPU_INFO = MetricSpec("gpulens_gpu_info", G, "1", ("node", "gpu", "index", "model", "sharing_mode", "driver_version"),
                      "Physical GPU identity and sharing mode (always 1).", _GPU)
GPU_UP = MetricSpec("gpulens_gpu_up", G, "1", _NG, "1 when the GPU answers, 0 when it is lost.", _GPU,
                    OtelInstrument("hw.status", _OU, "1", "1 for the GPU's current state (ok / failed)"))
GPU_POWER_WATTS = MetricSpec("gpulens_gpu_power_watts", G, "watts", _NG, "Power draw of the physical GPU.", _GPU,
                             OtelInstrument("hw.power", _OG, "W"))
GPU_ENERGY_JOULES = MetricSpec("gpulens_gpu_energy_joules_total", C, "joules", _NG,
                               "Energy consumed since the driver loaded.", _GPU, OtelInstrument("hw.energy", _OC, "J"))
GPU_TEMPERATURE_CELSIUS = MetricSpec("gpulens_gpu_temperature_celsius", G, "degrees Celsius", _NG,
                                     "GPU core temperature.", _GPU, OtelInstrument("hw.temperature", _OG, "Cel"))
GPU_SM_CLOCK_HERTZ = MetricSpec("gpulens_gpu_sm_clock_hertz", G, "hertz", _NG, "Current SM clock.", _GPU)
GPU_MEMORY_CLOCK_HERTZ = MetricSpec("gpulens_gpu_memory_clock_hertz", G, "hertz", _NG, "Current memory clock.", _GPU)
GPU_THROTTLE_ACTIVE = MetricSpec("gpulens_gpu_throttle_active", G, "1", ("node", "gpu", "reason"),
                                 "1 while a clock-event (throttle) reason is active.", _GPU)
GPU_ECC_ERRORS = MetricSpec("gpulens_gpu_ecc_errors_total", C, "errors", ("node", "gpu", "type"),
                            "Aggregate ECC errors by type (corrected, uncorrected).", _GPU,
                            OtelInstrument("hw.errors", _OC, "{error}", "Aggregate ECC errors of the GPU"))
GPU_RETIRED_PAGES = MetricSpec("gpulens_gpu_retired_pages", G, "pages", _NG, "Memory pages retired.", _GPU)
GPU_ROW_REMAP_FAILED = MetricSpec("gpulens_gpu_row_remap_failed", G, "1", _NG,
                                  "1 when a row remap failed (drain and reset).", _GPU)
GPU_PCIE_REPLAY = MetricSpec("gpulens_gpu_pcie_replay_total", C, "replays", _NG, "PCIe replay counter.", _GPU)
GPU_NVLINK_CRC_ERRORS = MetricSpec("gpulens_gpu_nvlink_crc_errors_total", C, "errors", _NG,
                                   "NVLink CRC errors summed over links.", _GPU)
GPU_THERMAL_VIOLATION_SECONDS = MetricSpec("gpulens_gpu_thermal_violation_seconds_total", C, "seconds", _NG,
                                           "Time clock-limited by thermal violations.", _GPU)
GPU_XID_ERRORS = MetricSpec("gpulens_gpu_xid_errors_total", C, "events", ("node", "gpu", "xid"),
                            "XID events by code since the exporter started.", _GPU,
                            OtelInstrument("gpulens.gpu.xid.errors", _OC, "{event}"))
GPU_XID_LAST_SEEN = MetricSpec("gpulens_gpu_xid_last_seen_timestamp_seconds", G, "seconds since epoch",
                               ("node", "gpu", "xid"), "When an XID code was last seen.", _GPU)

# -- topology ------------------------------------------------------------------------------------
GPU_NUMA_INFO = MetricSpec("gpulens_gpu_numa_info", G, "1", ("node", "gpu", "numa_node", "cpu_affinity"),
                           "NUMA node and close CPUs of a GPU (always 1).", _TOPO)
GPU_NVLINK_LINKS = MetricSpec("gpulens_gpu_nvlink_links", G, "links", ("node", "gpu", "state"),
                              "NVLink links of a GPU by state (active, inactive).", _TOPO)
GPU_PEER_INFO = MetricSpec("gpulens_gpu_peer_info", G, "1",
                           ("node", "gpu", "peer_gpu", "common_ancestor", "p2p_nvlink", "nvlink_domain"),
                           "How a GPU reaches another GPU of the node (always 1).", _TOPO)
GPU_FABRIC_INFO = MetricSpec("gpulens_gpu_fabric_info", G, "1", ("node", "gpu", "cluster_uuid", "clique_id", "state"),
                             "NVLink fabric (NVSwitch domain) of a GPU (always 1).", _TOPO)

# -- per allocatable device ----------------------------------------------------------------------
DEVICE_GPU_EQUIVALENTS = MetricSpec(
    "gpulens_device_gpu_equivalents", G, "GPU-equivalents",
    ("node", "gpu", "device", "model", "profile", "gpu_instance", "compute_instance", "sharing_mode"),
    "Compute share of an allocatable device (1 GPU, g/7 MIG).", _DEV)
DEVICE_ACTIVITY_RATIO = MetricSpec(
    "gpulens_device_activity_ratio", G, "ratio 0..1",
    ("node", "gpu", "device", "profile", "gpu_instance", "compute_instance"),
    "Graphics-engine activity of the device (0..1).", _DEV,
    OtelInstrument("hw.gpu.utilization", _OG, "1", "Graphics-engine activity of a GPU or MIG instance"))
DEVICE_MEMORY_USED_BYTES = MetricSpec("gpulens_device_memory_used_bytes", G, "bytes", _MEMORY,
                                      "Memory in use, once per whole GPU or MIG GPU instance.", _DEV,
                                      OtelInstrument("hw.gpu.memory.usage", _OU, "By"))
DEVICE_MEMORY_TOTAL_BYTES = MetricSpec("gpulens_device_memory_total_bytes", G, "bytes", _MEMORY,
                                       "Memory size, once per whole GPU or MIG GPU instance.", _DEV,
                                       OtelInstrument("hw.gpu.memory.limit", _OU, "By"))

# -- allocations and tenants ---------------------------------------------------------------------
ALLOCATION_GPU_EQUIVALENTS = MetricSpec(
    "gpulens_allocation_gpu_equivalents", G, "GPU-equivalents",
    ("node", "gpu", "device", "profile", "namespace", "pod", "container", "tenant", "sharing_mode",
     "workload_kind", "workload"),
    "Share of a device held by one container.", _ALLOC,
    OtelInstrument("gpulens.allocation.gpu_equivalents", _OG, "1"))
TENANT_ALLOCATED_GPU_EQUIVALENTS = MetricSpec("gpulens_tenant_allocated_gpu_equivalents", G, "GPU-equivalents",
                                              _TENANT, "GPU-equivalents allocated to the tenant.", _TEN)
TENANT_ACTIVE_GPU_EQUIVALENTS = MetricSpec(
    "gpulens_tenant_active_gpu_equivalents", G, "GPU-equivalents", _TENANT,
    "Active part of the tenant's allocated GPU-equivalents on measured devices (<= allocated).", _TEN)
TENANT_UNMEASURED_GPU_EQUIVALENTS = MetricSpec(
    "gpulens_tenant_unmeasured_gpu_equivalents", G, "GPU-equivalents", _TENANT,
    "Allocated GPU-equivalents whose activity the hardware cannot report.", _TEN)
TENANT_DEVICES = MetricSpec("gpulens_tenant_devices", G, "devices", _TENANT,
                            "Devices or replicas the tenant holds on this node.", _TEN)

# -- the exporter itself -------------------------------------------------------------------------
EXPORTER_BUILD_INFO = MetricSpec("gpulens_exporter_build_info", G, "1", ("version", "backend"),
                                 "The exporter's version and device backend (always 1).", _EXP)
EXPORTER_CYCLES = MetricSpec("gpulens_exporter_cycles_total", C, "cycles", ("node",),
                             "Collection cycles completed.", _EXP)
EXPORTER_CYCLE_DURATION_SECONDS = MetricSpec("gpulens_exporter_cycle_duration_seconds", G, "seconds", ("node",),
                                             "Wall time of the last collection cycle.", _EXP,
                                             OtelInstrument("gpulens.exporter.cycle.duration", _OG, "s"))
EXPORTER_LAST_SUCCESS = MetricSpec("gpulens_exporter_last_success_timestamp_seconds", G, "seconds since epoch",
                                   ("node",), "When the last collection cycle completed.", _EXP)
EXPORTER_ERRORS = MetricSpec("gpulens_exporter_errors_total", C, "errors", ("node", "source"),
                             "Errors by source; metrics keep flowing from the others.", _EXP,
                             OtelInstrument("gpulens.exporter.errors", _OC, "{error}",
                                            "Errors by source since the exporter started"))

CATALOG: tuple[MetricSpec, ...] = tuple(v for v in globals().values() if isinstance(v, MetricSpec))
"""Every series of the exporter, in exposition order."""

BY_NAME: dict[str, MetricSpec] = {spec.name: spec for spec in CATALOG}
if len(BY_NAME) != len(CATALOG):  # pragma: no cover - a definition error, caught at import
    raise ValueError("a metric name is catalogued twice")


def in_groups(*groups: MetricGroup) -> tuple[MetricSpec, ...]:
    """The catalogued series of ``groups``, in catalog order."""
    return tuple(spec for spec in CATALOG if spec.group in groups)
