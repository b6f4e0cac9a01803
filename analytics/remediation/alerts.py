"""Alertmanager webhook payloads (version 4) as the GPU fault alerts remediation acts on.

Only the alerts of gpulens's own rules are used: the hard faults (``gpulens.health.alerts``: a lost GPU,
a drain-class XID, double-bit ECC, a failed row remap, retired pages; their DCGM twins) count as the
health state ``drain``, the early warnings (``gpulens.early_warning.alerts``: rising error rates that
precede a failure) as ``watch``. Any other alert, or one that names no node, is listed as ignored with
the reason. Times are naive UTC, as everywhere in gpulens.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpulens.core.errors import UserError

HARD_FAULTS = {
    "GpuDown": "gpu_lost",
    "GpuDrainClassXid": "xid",
    "GpuUncorrectableEccErrors": "ecc_double_bit",
    "GpuRowRemapFailed": "row_remap_failure",
    "GpuRetiredPagesHigh": "retired_pages",
    "DcgmGpuRowRemapFailed": "row_remap_failure",
    "DcgmGpuRetiredPagesHigh": "retired_pages",
}
"""Hard-fault alert -> the health signal it stands for (``xid`` becomes ``xid_<code>``)."""
EARLY_WARNINGS = {
    "GpuCorrectableEccRateRising": "trend_ecc_corrected_per_hour",
    "GpuResetClassXidsRepeating": "trend_reset_class_xids",
    "GpuNvlinkCrcErrorRateRising": "trend_nvlink_crc_per_hour",
    "GpuPcieReplayRateRising": "trend_pcie_replay_per_hour",
    "GpuThrottlingGrowing": "trend_throttling",
    "GpuClockDropUnderLoad": "trend_sm_clock_drop",
}
"""Early-warning alert -> the trend signal it stands for."""
_ZERO_TIME = "0001-01-01T00:00:00Z"
_FRACTION = re.compile(r"(\.\d{6})\d+")


class BadWebhook(UserError):
    """A request body that is not an Alertmanager webhook payload (version 4)."""


class _Alert(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: str = Field(pattern="^(firing|resolved)$")
    labels: dict[str, str]
    annotations: dict[str, str] = {}
    startsAt: str  # noqa: N815 - Alertmanager's field name
    endsAt: str = _ZERO_TIME  # noqa: N815
    fingerprint: str = ""


class _Payload(BaseModel):
    model_config = ConfigDict(extra="ignore")

    version: str = "4"
    groupKey: str = ""  # noqa: N815 - Alertmanager's field name
    status: str = "firing"
    alerts: list[_Alert]


@dataclass(frozen=True)
class GpuAlert:
    """One alert about one GPU (or node): what it says, since when, and whether it still fires."""

    fingerprint: str
    name: str
    firing: bool
    node: str
    gpu: str
    """The GPU's UUID (``''`` when the alert names none)."""
    state: str
    """``drain`` (hard fault) or ``watch`` (early warning)."""
    signal: str
    starts_at: datetime
    ends_at: datetime | None
    summary: str

    @property
    def reason(self) -> str:
        """The evidence line, as the health table words its reasons: ``<gpu>: <what>``."""
        what = f"alert {self.name} firing since {self.starts_at:%Y-%m-%d %H:%M:%S} UTC: {self.summary}".rstrip(": ")
        return f"{self.gpu}: {what}" if self.gpu else what


@dataclass(frozen=True)
class Webhook:
    group_key: str
    alerts: tuple[GpuAlert, ...]
    ignored: tuple[str, ...] = ()
    """One line per alert not acted on, with the reason."""


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 time as naive UTC (``None`` for Alertmanager's zero time: not ended)."""
    if not text or text.startswith("0001-01-01"):
        return None
    try:
        stamp = datetime.fromisoformat(_FRACTION.sub(r"\1", text.replace("Z", "+00:00")))
    except ValueError as exc:
        raise BadWebhook(f"not an RFC 3339 time: {text!r}") from exc
    offset = stamp.utcoffset()
    return (stamp - offset).replace(tzinfo=None) if offset is not None else stamp


def parse_webhook(body: bytes) -> Webhook:
    """The GPU alerts of an Alertmanager webhook body; ``BadWebhook`` when it is not one."""
    try:
        payload = _Payload.model_validate(json.loads(body))
    except (ValueError, ValidationError) as exc:
        first = exc.errors()[0] if isinstance(exc, ValidationError) else {"loc": (), "msg": str(exc)}
        where = ".".join(str(p) for p in first["loc"])
        raise BadWebhook(f"not an Alertmanager webhook payload: {where + ': ' if where else ''}{first['msg']}") from exc
    if payload.version != "4":
        raise BadWebhook(f"Alertmanager webhook version {payload.version!r}: only version 4 is understood")
    alerts, ignored = [], []
    for raw in payload.alerts:
        alert, why = _gpu_alert(raw)
        if alert is None:
            ignored.append(why)
        else:
            alerts.append(alert)
    return Webhook(payload.groupKey, tuple(alerts), tuple(ignored))


def _gpu_alert(raw: _Alert) -> tuple[GpuAlert | None, str]:
    labels = raw.labels
    name = labels.get("alertname", "")
    if name in HARD_FAULTS:
        state, signal = "drain", HARD_FAULTS[name]
        if signal == "xid":
            signal = f"xid_{labels.get('xid', 'unknown')}"
    elif name in EARLY_WARNINGS:
        state, signal = "watch", EARLY_WARNINGS[name]
    else:
        return None, f"{name or '(no alertname)'}: not a GPU fault or early-warning alert of gpulens"
    node = labels.get("node", "")
    if not node:
        return None, f"{name}: names no node (label 'node')"
    starts = parse_time(raw.startsAt)
    if starts is None:
        return None, f"{name} on {node}: no startsAt"
    fingerprint = raw.fingerprint or hashlib.sha256(json.dumps(sorted(labels.items())).encode()).hexdigest()[:16]
    summary = " ".join((raw.annotations.get("description") or raw.annotations.get("summary") or "").split())
    return GpuAlert(fingerprint, name, raw.status == "firing", node, labels.get("gpu") or labels.get("UUID", ""),
                    state, signal, starts, parse_time(raw.endsAt), summary[:500]), ""

