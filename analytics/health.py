"""Health per GPU and node: ok / watch / warn / drain from XID classes, DCGM-style thresholds and trends.

A GPU is ``watch`` when an early-warning trend (``early_warning.py``) is raised and still counts; such
a GPU is a drain candidate (keep new work off it) before anything fails. A GPU drains on a drain-class XID, any double-bit ECC error in the window, retired pages at or
above the limit, a row-remap failure, or a lost GPU (``up = false``); it warns on a warn-class or
unclassified XID, an NVLink CRC error rate at or above the limit, or any thermal-violation time.
Application XIDs (13, 31, 43, 45, 68 by default) are listed as ``info`` and never change the state.
Signals with no readings in the window are listed as ``unmeasured`` (``not_measured``): not checked,
which is not the same as fine. A GPU whose samples stopped or thinned out within the window warns
(``sample_coverage.py``): the monitoring's own gaps are evidence, never "healthy".
A node takes the worst state of its GPUs; it is a drain candidate when one of its GPUs is. Where a
GPU warned before it failed in the window, ``lead_seconds`` says by how much.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

import duckdb

from analytics import early_warning, gpu_day, sample_coverage
from analytics.facts import Window
from analytics.result_tables import append_columns, column_names
from analytics.settings import HealthRules
from gpulens.core.states import HealthState

_RANK = {str(state): state.rank for state in HealthState}
_FAILURE_SIGNALS = ("gpu_lost", "row_remap_failure")
"""Drain evidence with a true first time (XID events have one too; counter deltas only have the window)."""


@dataclass(frozen=True)
class Evidence:
    signal: str
    value: float
    threshold: float | None
    severity: str
    """info | watch | warn | drain | unmeasured (a signal with no readings: never changes the state)"""
    reason: str
    first_ts: datetime | None = None
    last_ts: datetime | None = None
    onset_ts: datetime | None = None
    """A failure state's (row-remap failure, lost GPU) first reading after one without it in the window: when the
    failure began, as measured. None when it was already there at the window's first reading."""

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "signal": self.signal,
            "value": float(self.value),
            "threshold": None if self.threshold is None else float(self.threshold),
            "severity": self.severity,
            "reason": self.reason,
        }
        if self.severity == "watch":
            out["since"] = None if self.first_ts is None else self.first_ts.isoformat()
            out["detected"] = None if self.last_ts is None else self.last_ts.isoformat()
        elif self.signal in sample_coverage.SIGNALS:
            out["since"] = None if self.first_ts is None else self.first_ts.isoformat()
        return out

    @property
    def marks_failure(self) -> bool:
        """Drain evidence that says when a hard failure happened (``failed_at``)."""
        return self.severity == "drain" and (self.signal.startswith("xid_") or self.signal in _FAILURE_SIGNALS)

    @property
    def failed_at(self) -> datetime | None:
        """When the hard failure happened: an XID's first event, a failure state's measured onset."""
        return self.onset_ts if self.signal in _FAILURE_SIGNALS else self.first_ts


@dataclass(frozen=True)
class GpuHealth:
    node: str
    gpu_uuid: str
    state: str
    evidence: tuple[Evidence, ...]

    @property
    def trends(self) -> tuple[Evidence, ...]:
        return tuple(e for e in self.evidence if e.severity == "watch")

    @property
    def drain_candidate(self) -> bool:
        """Drain-class evidence, or a raised early-warning trend: keep new work off this GPU."""
        return self.state == "drain" or bool(self.trends)

    @property
    def trend_start(self) -> datetime | None:
        return min((e.first_ts for e in self.trends if e.first_ts is not None), default=None)

    @property
    def warning_ts(self) -> datetime | None:
        """When the first trend was raised."""
        return min((e.last_ts for e in self.trends if e.last_ts is not None), default=None)

    @property
    def failure_ts(self) -> datetime | None:
        return min((t for e in self.evidence if e.marks_failure and (t := e.failed_at) is not None), default=None)

    @property
    def lead_seconds(self) -> float | None:
        """How long before the first hard failure in the window the first trend was raised (None: no such pair,
        or the trend came with the failure, not before it)."""
        warned, failed = self.warning_ts, self.failure_ts
        if warned is None or failed is None or warned >= failed:
            return None
        return (failed - warned).total_seconds()


def classify_xid(code: int, rules: HealthRules) -> str:
    """Severity of an XID: ``drain``, ``warn``, ``info`` (application error) or the unknown-XID default."""
    if code in rules.application_xids:
        return "info"
    if code in rules.drain_xids:
        return "drain"
    if code in rules.warn_xids:
        return "warn"
    return rules.unknown_xid_state if rules.unknown_xid_state != "ok" else "info"


_COLUMNS = ", ".join(f"p.{c}" for c in gpu_day.HEALTH_COLUMNS)
_NAMES = ", ".join(("part_id", "gpu_uuid", *gpu_day.HEALTH_COLUMNS, "crc_rate", *gpu_day.ONSET_COLUMNS))

_ONSETS = ("p.remap_onset, coalesce(p.remap_at_first, p.remap_failed), coalesce(p.remap_at_last, p.remap_failed), "
           "p.lost_onset, coalesce(p.lost_at_first, p.lost), coalesce(p.lost_at_last, p.lost)")
"""``gpu_day.ONSET_COLUMNS``: a GPU never failed in the span was read not failed (or never read) first and last."""

PART_HEALTH_SELECT = """
SELECT $part_id, p.gpu_uuid, {columns}, {crc_rate}, """ + _ONSETS + """ FROM an_gpu_day p {crc_join}
"""
"""``part_health`` rows of one day part from its per-GPU sums (``an_gpu_day``, all samples): per GPU, the
counters' minima and maxima and the signals' times (a counter's rise over the window is the largest
maximum minus the smallest minimum of its days)."""

_CRC_RATE = """
LEFT JOIN (  -- highest 5-minute NVLink CRC error rate (errors/s), only for GPUs whose counter moved
    SELECT gpu_uuid, max(rate) AS crc_rate FROM (
        SELECT gpu_uuid,
               (max(nvlink_crc_errors_total) - min(nvlink_crc_errors_total))
               / greatest(epoch(max(ts)) - epoch(min(ts)), 1) AS rate
        FROM f_gpu_samples
        WHERE ts >= $start AND ts < $end AND list_contains($moved, gpu_uuid)
        GROUP BY gpu_uuid, time_bucket(to_seconds($bs), ts, $start::TIMESTAMP)
    ) GROUP BY gpu_uuid
) c USING (gpu_uuid)
"""


CRC_RATE_SECONDS = 300
"""The NVLink CRC error rate is measured over 5-minute spans whatever the analysis bucket (an hourly mean
would hide a burst that the rule, 100+ errors/s, is about)."""


def insert_part_health(con: duckdb.DuckDBPyConnection, part_id: str, window: Window, rules: HealthRules) -> None:
    """Write one day part's GPU health sums and its early-warning buckets (the caller holds the transaction),
    from one grouping of its GPU samples per GPU (``gpu_day.py``); the samples are read again per GPU and
    bucket for the early-warning buckets, and only where needed for the CRC rate and the clock drops."""
    with gpu_day.built(con, window):
        insert_part_health_from_day(con, part_id, window, rules)


def insert_part_health_from_day(con: duckdb.DuckDBPyConnection, part_id: str, window: Window, rules: HealthRules) -> None:
    """:func:`insert_part_health` from an ``an_gpu_day`` already built for the span ``window``."""
    insert_part_health_rows(con, part_id, window)
    early_warning.insert_part_trends(con, part_id, window, rules.early_warning)


def insert_part_health_rows(con: duckdb.DuckDBPyConnection, part_id: str, window: Window) -> None:
    """Write one day part's ``part_health`` rows from ``an_gpu_day``; the samples of GPUs whose NVLink CRC
    counter moved are read again for their 5-minute rate (not at all when none moved)."""
    moved = gpu_day.crc_moved(con)
    params: dict[str, object] = {"part_id": part_id}
    if moved:
        sql = PART_HEALTH_SELECT.format(columns=_COLUMNS, crc_rate="c.crc_rate", crc_join=_CRC_RATE)
        params |= {"start": window.start, "end": window.end, "bs": CRC_RATE_SECONDS, "moved": moved}
    else:
        sql = PART_HEALTH_SELECT.format(columns=_COLUMNS, crc_rate="NULL::DOUBLE", crc_join="")
    con.execute(f"INSERT INTO part_health ({_NAMES}) " + sql, params)  # by name: an older store's new columns are last


WINDOW_HEALTH = """
WITH days AS (  -- each day part's row, with the GPU's last readings of the day before it (NULL: none read)
    SELECT *, lag(remap_at_last) OVER w AS remap_before, lag(lost_at_last) OVER w AS lost_before
    FROM an_health WINDOW w AS (PARTITION BY gpu_uuid ORDER BY first_ts)
)
SELECT gpu_uuid, max(ecc_max) - min(ecc_min) AS dbe, max(retired_max) AS retired,
       bool_or(remap_failed) AS remap_failed, min(remap_ts) AS remap_ts,
       min(CASE WHEN remap_at_first AND NOT remap_before THEN remap_ts ELSE remap_onset END) AS remap_onset,
       bool_or(lost) AS lost, min(lost_first) AS lost_first, max(lost_last) AS lost_last,
       min(CASE WHEN lost_at_first AND NOT lost_before THEN lost_first ELSE lost_onset END) AS lost_onset,
       max(thermal_max) - min(thermal_min) AS thermal, max(crc_max) - min(crc_min) AS crc, min(first_ts) AS first_ts,
       max(last_ts) AS last_ts, max(crc_rate) AS crc_rate
FROM days GROUP BY gpu_uuid
"""
"""Per GPU, its day parts' sums over the window: counter rises, failure states with their first readings and where
they were seen to begin (in a day, or at a day's first reading after a day that ended without it; a failure
already there at the window's first reading began before it, when, nobody measured), the window's first and
last sample and the highest CRC rate."""


@dataclass(frozen=True)
class HealthRows:
    """A window's GPU health: the GPUs with evidence one by one, the rest (``ok``, nothing to list) as the temp
    table ``an_health_quiet`` (gpu_uuid, node), which :func:`insert_health` writes out in SQL."""

    flagged: list[GpuHealth]
    """The GPUs with evidence or that might have it, in order of (gpu_uuid, node)."""

    def every_gpu(self, con: duckdb.DuckDBPyConnection) -> list[GpuHealth]:
        """Every GPU's health, in order of (gpu_uuid, node) (the quiet ones ``ok`` without evidence)."""
        quiet = [GpuHealth(node, gpu, "ok", ()) for gpu, node in con.execute(
            "SELECT gpu_uuid, node FROM an_health_quiet").fetchall()]
        return sorted([*self.flagged, *quiet], key=lambda g: (g.gpu_uuid, g.node))


_QUIET = """
CREATE OR REPLACE TEMP TABLE an_health_quiet AS
SELECT d.gpu_uuid, d.node
FROM (SELECT DISTINCT gpu_uuid, node FROM an_dev) d JOIN an_health_window w USING (gpu_uuid)
WHERE w.dbe <= 0 AND w.retired < $retired_drain AND NOT w.remap_failed AND NOT w.lost
  AND w.thermal <= $thermal_warn AND w.crc IS NOT NULL AND (w.crc_rate IS NULL OR w.crc_rate < $crc_warn)
  AND d.gpu_uuid NOT IN (SELECT unnest($named::VARCHAR[]))
"""
"""The GPUs whose window sums give no evidence (every signal read; nothing rose, failed or passed a limit) and that
no XID, trend or coverage gap names (``named``): ``ok`` with nothing to list, which most GPUs are."""


def assess(con: duckdb.DuckDBPyConnection, window: Window, rules: HealthRules, parts: list[str]) -> HealthRows:
    """Health of every GPU in the inventory over the window (``an_health``: the window's day parts, merged;
    ``parts``: their ids, whose early-warning buckets are read); only the GPUs with evidence are built one by one."""
    params = {"start": window.start, "end": window.end}
    con.execute(f"CREATE OR REPLACE TEMP TABLE an_health_window AS {WINDOW_HEALTH}")
    xids: dict[str, list[tuple[int, int, datetime, datetime]]] = defaultdict(list)
    for gpu, code, count, first, last in con.execute(
        """
        SELECT gpu_uuid, code, sum(count), min(ts), max(ts) FROM f_events
        WHERE kind = 'xid' AND code IS NOT NULL AND ts >= $start AND ts < $end
        GROUP BY ALL ORDER BY ALL
        """,
        params,
    ).fetchall():
        xids[gpu].append((int(code), int(count), first, last))
    trends: dict[str, list[Evidence]] = defaultdict(list)
    signals = early_warning.trend_bucket_signals(con, window, rules, parts)
    raised = early_warning.detect(signals, rules.early_warning)
    for t in early_warning.counting(raised, window, rules.early_warning):
        trends[t.gpu_uuid].append(
            Evidence(f"trend_{t.signal}", round(t.peak, 3), round(t.allowance, 3), "watch",
                     t.reason(rules.early_warning), t.started,
                     t.detected)
        )
    gaps: dict[str, list[Evidence]] = defaultdict(list)
    for gap in sample_coverage.coverage_gaps(con, window, rules):
        gaps[gap.gpu_uuid].append(Evidence(gap.signal, gap.value, gap.threshold, "warn", gap.reason, gap.since,
                                             gap.until))
    con.execute(_QUIET, {"retired_drain": rules.retired_pages_drain,
                         "thermal_warn": rules.thermal_violation_seconds_warn,
                         "crc_warn": rules.nvlink_crc_per_second_warn, "named": sorted({*xids, *trends, *gaps})})
    out = []
    for gpu_uuid, node, read, *counters, crc_rate in con.execute(
        "SELECT d.gpu_uuid, d.node, w.gpu_uuid IS NOT NULL, w.* EXCLUDE (gpu_uuid) "
        "FROM (SELECT DISTINCT gpu_uuid, node FROM an_dev) d LEFT JOIN an_health_window w USING (gpu_uuid) "
        "ANTI JOIN an_health_quiet q USING (gpu_uuid, node) ORDER BY d.gpu_uuid, d.node"
    ).fetchall():
        ev = _counter_evidence(tuple(counters) if read else None, None if crc_rate is None else float(crc_rate), rules)
        for code, count, first, last in xids.get(gpu_uuid, []):
            sev = classify_xid(code, rules)
            kind = {"info": "application error, never drains", "warn": "warn-class", "drain": "drain-class"}[sev]
            ev.append(Evidence(f"xid_{code}", count, None, sev, f"XID {code} x{count}: {kind}", first, last))
        ev.extend(trends.get(gpu_uuid, []))
        ev.extend(gaps.get(gpu_uuid, []))
        state = max((e.severity for e in ev if e.severity in _RANK), key=_RANK.__getitem__, default="ok")
        out.append(GpuHealth(node, gpu_uuid, state, tuple(ev)))
    return HealthRows(out)


_SIGNALS = ("ecc_double_bit", "retired_pages", "row_remap_failure", "gpu_lost", "thermal_violation_seconds",
            "nvlink_crc_rate")


def _not_measured(names: list[str], whole: bool) -> Evidence:
    """An ``unmeasured`` item (never changes the state): these signals were not checked, not found fine."""
    what = "no physical readings in the window" if whole else "no readings in the window"
    return Evidence("not_measured", len(names), None, "unmeasured",
                    f"{what} for {', '.join(names)}: not checked (unmeasured, not ok)")


def _counter_evidence(row: tuple | None, crc_rate: float | None, rules: HealthRules) -> list[Evidence]:
    if row is None:
        return [_not_measured(list(_SIGNALS), whole=True)]
    dbe, retired, remap_fail, remap_ts, remap_onset, lost, lost_first, lost_last, lost_onset, thermal, crc, first, last = row
    thermal = None if thermal is None else float(thermal)
    ev: list[Evidence] = []
    missing = [name for name, value in zip(_SIGNALS, (dbe, retired, remap_fail, lost, thermal, crc), strict=True)
               if value is None]
    if missing:
        ev.append(_not_measured(missing, whole=False))
    if dbe is not None and dbe > 0:
        ev.append(Evidence("ecc_double_bit", dbe, 0, "drain", f"{dbe} new double-bit ECC error(s)", first, last))
    if retired is not None and retired >= rules.retired_pages_drain:
        ev.append(
            Evidence(
                "retired_pages", retired, rules.retired_pages_drain, "drain",
                f"{retired} retired pages >= {rules.retired_pages_drain} (DCGM FAIL)", first, last,
            )
        )
    if remap_fail:
        ev.append(Evidence("row_remap_failure", 1, None, "drain", "row remapping failed", remap_ts, last, remap_onset))
    if lost:
        ev.append(Evidence("gpu_lost", 1, None, "drain", "GPU reported lost (up = false)", lost_first, lost_last,
                           lost_onset))
    if crc_rate is not None and crc_rate >= rules.nvlink_crc_per_second_warn:
        ev.append(
            Evidence(
                "nvlink_crc_rate", round(crc_rate, 3), rules.nvlink_crc_per_second_warn, "warn",
                f"NVLink CRC errors at {crc_rate:.1f}/s >= {rules.nvlink_crc_per_second_warn:g}/s", first, last,
            )
        )
    if thermal is not None and thermal > rules.thermal_violation_seconds_warn:
        ev.append(
            Evidence(
                "thermal_violation_seconds", round(thermal, 3), rules.thermal_violation_seconds_warn, "warn",
                f"{thermal:.1f} s of thermal violation in the window", first, last,
            )
        )
    return ev


def node_health(node: str, members: list[GpuHealth]) -> GpuHealth:
    """A node as one pseudo-GPU: the worst state and every GPU's evidence."""
    state = max((g.state for g in members), key=_RANK.__getitem__)
    return GpuHealth(node, "", state, tuple(e for g in members for e in g.evidence))


def insert_health(con: duckdb.DuckDBPyConnection, run_id: str, window: Window, rows: HealthRows) -> None:
    """Write GPU rows and node rows (worst GPU state, evidence tagged with the GPU); the quiet GPUs, and the nodes
    with none but quiet GPUs, are written in SQL (``ok``, no evidence)."""
    cols: dict[str, list[object]] = {c: [] for c in column_names("health")}
    values = list(cols.values())
    by_node: dict[str, list[GpuHealth]] = defaultdict(list)
    texts: dict[tuple[Evidence, ...], str] = {}  # many GPUs have the same evidence: encoded once
    run = (run_id, window.start, window.end)
    for g in rows.flagged:
        by_node[g.node].append(g)
        if not g.evidence:  # nothing to encode, no times to look for
            _append_row(values, (*run, "gpu", g.node, g.gpu_uuid, g.state, g.state == "drain", "[]", *_NO_TIMES))
            continue
        text = texts.get(g.evidence)
        if text is None:
            text = texts[g.evidence] = json.dumps([e.as_json() for e in g.evidence])
        _append_row(values, (*run, "gpu", g.node, g.gpu_uuid, g.state, g.drain_candidate, text, *_times(g)))
    for node, members in sorted(by_node.items()):
        if not any(g.evidence for g in members):  # its quiet GPUs are ok: the flagged ones decide its state
            state = max((g.state for g in members), key=_RANK.__getitem__)
            _append_row(values, (*run, "node", node, None, state, state == "drain", "[]", *_NO_TIMES))
            continue
        tagged = [{**e.as_json(), "gpu_uuid": g.gpu_uuid} for g in members for e in g.evidence]
        h = node_health(node, members)
        _append_row(values, (*run, "node", node, None, h.state, h.drain_candidate, json.dumps(tagged), *_times(h)))
    names = ", ".join(column_names("health"))
    params: dict[str, object] = {"run": run_id, "start": window.start, "end": window.end}
    con.execute(f"INSERT INTO health ({names}) SELECT $run, $start, $end, 'gpu', node, gpu_uuid, 'ok', false, '[]', "  # noqa: S608
                "NULL, NULL, NULL, NULL, NULL, NULL FROM an_health_quiet ORDER BY gpu_uuid, node", params)
    params["nodes"] = list(by_node)
    con.execute(f"INSERT INTO health ({names}) SELECT $run, $start, $end, 'node', node, NULL, 'ok', false, '[]', "  # noqa: S608
                "NULL, NULL, NULL, NULL, NULL, NULL FROM (SELECT DISTINCT node FROM an_health_quiet) "
                "WHERE node NOT IN (SELECT unnest($nodes::VARCHAR[])) ORDER BY node", params)
    append_columns(con, "health", cols)


_NO_TIMES = (None, None, None, None, None, None)
"""The six time columns of a row without evidence."""


def _times(g: GpuHealth) -> tuple[object, ...]:
    """A row's first and last warn/drain evidence times, trend start, warning, failure and lead seconds."""
    flagged = [e for e in g.evidence if e.severity in ("warn", "drain")]
    firsts = [e.first_ts for e in flagged if e.first_ts is not None]
    lasts = [e.last_ts for e in flagged if e.last_ts is not None]
    return (min(firsts, default=None), max(lasts, default=None), g.trend_start, g.warning_ts, g.failure_ts,
            g.lead_seconds)


def _append_row(columns: list[list[object]], row: tuple[object, ...]) -> None:
    for column, value in zip(columns, row, strict=True):
        column.append(value)
