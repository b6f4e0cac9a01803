"""The recording rules that turn dcgm-exporter series of either generation into one series in base units.

Group ``gpulens.dcgm.rules`` of deploy/prometheus/gpulens-rules.yaml: one record per field the collector
reads (:mod:`collector.dcgm_fields`), e.g. ``device:dcgm_gpu_util:ratio`` is
``DCGM_FI_DEV_GPU_UTIL_RATIO or DCGM_FI_DEV_GPU_UTIL / 100``: each name scaled by its own unit, so
alerts and Grafana dashboards read one series whether a node runs dcgm-exporter before 4.9 or after.
Every label of the source series is kept, and ``node`` is added from ``Hostname`` / ``hostname``.
``tests/test_rules.py`` holds the rules file to this list.
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.dcgm_fields import INGESTED, DcgmField

DCGM_GROUP = "gpulens.dcgm.rules"
"""The rule group in deploy/prometheus/gpulens-rules.yaml that records them."""

DEVICE_KEYS = frozenset({"gr_engine", "sm_active", "gpu_util", "fb_used", "fb_free", "fb_reserved", "fb_total"})
"""Fields read per device (whole GPU or MIG GPU instance); the others are physical, per GPU."""

OPERATION_OF_BASE_UNIT = {"ratio": "ratio", "bytes": "bytes", "W": "watts", "degC": "celsius", "J": "joules",
                          "Hz": "hertz", "1": "value"}
"""The record's operations segment: the base unit it is in (``value`` for counts, codes and flags)."""


def _term(name: str, scale: float) -> str:
    if scale == 1.0:
        return name
    if scale < 1.0:
        return f"{name} / {round(1 / scale)}"
    return f"{name} * {round(scale)}"


@dataclass(frozen=True)
class DcgmRecord:
    """The generation-independent record of one dcgm-exporter field."""

    field: DcgmField

    @property
    def record(self) -> str:
        level = "device" if self.field.key in DEVICE_KEYS else "gpu"
        base = self.field.unit_of(self.field.legacy).base
        return f"{level}:dcgm_{self.field.key}:{OPERATION_OF_BASE_UNIT[base]}"

    @property
    def expr(self) -> str:
        """Newest name first (``or`` keeps a series of the first operand where both exist)."""
        terms = " or ".join(_term(name, self.field.unit_of(name).scale) for name in reversed(self.field.names))
        return f'label_replace(label_replace({terms}, "node", "$1", "Hostname", "(.+)"), "node", "$1", "hostname", "(.+)")'


DCGM_RECORDS: tuple[DcgmRecord, ...] = tuple(DcgmRecord(f) for f in INGESTED)
"""The records, in the order of the rule group."""

BY_KEY: dict[str, DcgmRecord] = {r.field.key: r for r in DCGM_RECORDS}
