"""The report's health timeline: per unhealthy node, its signals, state changes and taint, in time order.

Built from the latest health run (``gpulens analyze``): early-warning trends (when each began and when
it was raised), the node's XID events in the window, the hard failure, the state the evidence moved the
node to as it arrived (ok -> watch -> warn -> drain), the states of earlier runs, and what
``gpulens remediate`` decides for the node from this run under the default caps (the dry-run taint, or
the cap that refuses it). Taints set on a live cluster are not recorded in the store, so the taint
line is the plan, and says so.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from analytics.remediation.decide import Decision, NodeCase, decide
from analytics.remediation.policy import TAINT_KEY, RemediationPolicy
from analytics.remediation.taints import taint_value
from dashboards.report import html_parts as h
from dashboards.report.data import StoreReader

_RANK = {"ok": 0, "info": 0, "watch": 1, "warn": 2, "drain": 3}
MAX_EVENTS = 40
"""Most events listed per node (the earliest are dropped first: the latest explain the state)."""
_WORDS = {
    "trend_ecc_corrected_per_hour": "correctable ECC errors",
    "trend_pcie_replays_per_hour": "PCIe replays",
    "trend_nvlink_crc_per_hour": "NVLink CRC errors",
    "trend_thermal_seconds_per_hour": "thermal throttling",
    "trend_clock_drop_minutes_per_hour": "SM clock drops under load",
    "trend_hardware_xids_per_hour": "warn-class hardware XIDs",
}
_COVERAGE = {"samples_stopped": "samples stopped (exporter silent or metrics vanished)",
             "samples_thinned": "samples thinned out (scrapes failing or series dropped)"}
"""The monitoring's own gaps (``sample_coverage.py``): evidence with the time they began."""


@dataclass(frozen=True)
class TimelineEvent:
    ts: datetime | None
    gpu_uuid: str
    kind: str
    """``signal``, ``state`` or ``taint``."""
    text: str


@dataclass(frozen=True)
class NodeTimeline:
    node: str
    state: str
    lead_seconds: float | None
    events: tuple[TimelineEvent, ...]


def node_timelines(reader: StoreReader, policy: RemediationPolicy | None = None) -> list[NodeTimeline]:
    """Timelines of the nodes that are not ``ok`` in the run the reader shows, worst first."""
    reader.require("health")
    run = reader.selected_run()  # the run the report shows (--run-id, default the newest)
    run_id, start, end = str(run["run_id"][0]), run["window_start"][0], run["window_end"][0]
    nodes = reader.frame(
        """
        SELECT h.node, h.state, h.drain_candidate, h.warning_ts, h.failure_ts, h.lead_seconds, h.evidence,
               coalesce(n.pool, n.gpu_model, 'unknown') AS flavor
        FROM health h LEFT JOIN (SELECT node, any_value(pool) AS pool, any_value(gpu_model) AS gpu_model
                                 FROM nodes GROUP BY node) n USING (node)
        WHERE h.run_id = ? AND h.scope = 'node' ORDER BY h.node
        """,
        [run_id],
    )
    decisions = _decisions(nodes, policy or RemediationPolicy(), end)
    xids = _xids(reader, start, end)
    history = _history(reader, run_id)
    out = []
    for row in nodes.iter_rows(named=True):
        if row["state"] == "ok":
            continue
        evidence = json.loads(row["evidence"])
        events = _signals(evidence, row, xids.get(row["node"], []))
        events += _state_changes(events, evidence)
        events += history.get(row["node"], [])
        decision = decisions.get(row["node"])
        if decision is not None:
            events.append(_taint_event(decision, evidence, end))
        events.sort(key=lambda e: (e.ts or end, _KIND_ORDER[e.kind]))
        out.append(NodeTimeline(row["node"], row["state"], row["lead_seconds"], tuple(events[-MAX_EVENTS:])))
    return sorted(out, key=lambda t: (-_RANK[t.state], t.node))


_KIND_ORDER = {"signal": 0, "state": 1, "taint": 2}


def _signals(evidence: list[dict[str, Any]], row: dict[str, Any], xids: list[tuple[Any, ...]]) -> list[TimelineEvent]:
    """Trend starts and raises, XID events (with the severity the run gave them) and the failure."""
    out = []
    xid_severity = {e["signal"]: e["severity"] for e in evidence if str(e["signal"]).startswith("xid_")}
    for e in evidence:
        if e["signal"] in _COVERAGE and e.get("since"):
            out.append(TimelineEvent(_ts(e["since"]), e.get("gpu_uuid", ""), "signal", _COVERAGE[e["signal"]]))
        if e["severity"] != "watch":
            continue
        what = _WORDS.get(e["signal"], e["signal"])
        gpu = e.get("gpu_uuid", "")
        if e.get("since"):
            out.append(TimelineEvent(_ts(e["since"]), gpu, "signal", f"{what} began rising"))
        if e.get("detected"):
            out.append(TimelineEvent(_ts(e["detected"]), gpu, "signal", f"trend raised: {e['reason']}"))
    for ts, gpu, code, count, detail in xids:
        severity = xid_severity.get(f"xid_{code}", "info")
        times = f" x{count}" if count and count > 1 else ""
        out.append(TimelineEvent(ts, gpu, "signal", f"XID {code}{times} ({severity}): {detail or ''}".rstrip(": ")))
    if row["failure_ts"] is not None:
        lead = row["lead_seconds"]
        tail = f", {lead / 3600:.1f} h after the first warning" if lead is not None else ""
        out.append(TimelineEvent(row["failure_ts"], "", "signal", f"hard failure{tail}"))
    return out


def _state_changes(signals: list[TimelineEvent], evidence: list[dict[str, Any]]) -> list[TimelineEvent]:
    """The node's state as the evidence arrived: each step up, with the signal that made it."""
    steps: list[tuple[datetime, int, str, str]] = []
    for ev in signals:
        if ev.text.startswith("trend raised") and ev.ts is not None:
            steps.append((ev.ts, 1, "watch", "early-warning trend"))
        elif ev.text.startswith("XID") and ev.ts is not None:
            severity = ev.text.split("(", 1)[1].split(")", 1)[0]
            if _RANK.get(severity, 0):
                steps.append((ev.ts, _RANK[severity], severity, ev.text.split(":", 1)[0]))
        elif ev.text.startswith("hard failure") and ev.ts is not None:
            steps.append((ev.ts, 3, "drain", "hard failure"))
        elif ev.text in _COVERAGE.values() and ev.ts is not None:
            steps.append((ev.ts, 2, "warn", ev.text.split(" (", 1)[0]))
    out, state = [], "ok"
    for ts, rank, new, why in sorted(steps, key=lambda s: (s[0], s[1])):
        if rank > _RANK[state]:
            out.append(TimelineEvent(ts, "", "state", f"{state} -> {new} ({why})"))
            state = new
    counter_only = [e for e in evidence if e["severity"] in ("warn", "drain") and not str(e["signal"]).startswith("xid_")]
    if counter_only and not out:
        worst = max(counter_only, key=lambda e: _RANK[e["severity"]])
        out.append(TimelineEvent(None, "", "state", f"ok -> {worst['severity']} ({worst['reason']}; time not recorded)"))
    return out


def _history(reader: StoreReader, run_id: str) -> dict[str, list[TimelineEvent]]:
    """Each earlier run's state of a node where it differs from the run before (nothing with one run)."""
    rows = reader.frame(
        """
        SELECT h.node, h.state, r.window_end, r.run_id FROM health h JOIN analysis_runs r USING (run_id)
        WHERE h.scope = 'node' AND r.run_id <> ? ORDER BY h.node, r.window_end
        """,
        [run_id],
    )
    out: dict[str, list[TimelineEvent]] = defaultdict(list)
    last: dict[str, str] = {}
    for node, state, ts, rid in rows.iter_rows():
        if last.get(node, "ok") != state:
            out[node].append(TimelineEvent(ts, "", "state", f"analysis run {rid} (window end): {state}"))
        last[node] = state
    return out


def _xids(reader: StoreReader, start: datetime, end: datetime) -> dict[str, list[tuple[Any, ...]]]:
    rows = reader.frame(
        """
        SELECT node, ts, gpu_uuid, code, count, detail FROM events
        WHERE kind = 'xid' AND code IS NOT NULL AND ts >= ? AND ts < ? ORDER BY node, ts
        """,
        [start, end],
    )
    out: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for node, *rest in rows.iter_rows():
        out[node].append(tuple(rest))
    return out


def _decisions(nodes: pl.DataFrame, policy: RemediationPolicy, now: datetime) -> dict[str, Decision]:
    cases = [NodeCase(r["node"], r["flavor"], r["state"], bool(r["drain_candidate"]), r["warning_ts"])
             for r in nodes.iter_rows(named=True)]
    effects = {c.node: ("NoExecute" if c.state in policy.no_execute_states else "NoSchedule") for c in cases}
    return {d.node: d for d in decide(cases, policy, now, effects)}


def _taint_event(d: Decision, evidence: list[dict[str, Any]], at: datetime) -> TimelineEvent:
    flagged = sorted((e for e in evidence if e["severity"] in ("drain", "watch", "warn")),
                     key=lambda e: -_RANK[e["severity"]])
    value = taint_value(str(flagged[0]["signal"])) if flagged else "unhealthy"
    if d.action == "taint":
        text = (f"taint planned: {TAINT_KEY}={value}:{d.effect} (`gpulens remediate` dry run from this run; "
                "`--apply` sets it)")
    else:
        text = f"remediate: {d.action}: {d.reason}"
    return TimelineEvent(at, "", "taint", text)


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


def section(reader: StoreReader) -> str:
    """The report section: one table per node that is not ``ok``."""
    timelines = node_timelines(reader)
    intro = ("Per node that is not ok in the latest health run: when each early-warning trend began and was "
             "raised, its XID events, the hard failure, the state the evidence moved it to, and the taint "
             "`gpulens remediate` plans (caps applied; live taints are not recorded in the store).")
    if not timelines:
        return h.section("health-timeline", "Health timeline", "<p>Every node is ok.</p>", intro=intro)
    cols = [h.Col("ts", "time", h.fmt_time, numeric=False), h.Col("gpu_uuid", "GPU", h.text, numeric=False),
            h.Col("kind", "kind", h.text, numeric=False), h.Col("text", "event", h.text, numeric=False)]
    parts = []
    for t in timelines:
        lead = f", warned {t.lead_seconds / 3600:.1f} h before it failed" if t.lead_seconds is not None else ""
        frame = pl.DataFrame([{"ts": e.ts, "gpu_uuid": e.gpu_uuid, "kind": e.kind, "text": e.text} for e in t.events],
                             schema={"ts": pl.Datetime, "gpu_uuid": pl.Utf8, "kind": pl.Utf8, "text": pl.Utf8})
        parts.append(f"<h3>{h.esc(t.node)}: {h.esc(t.state)}{h.esc(lead)}</h3>" + h.table(frame, cols))
    return h.section("health-timeline", "Health timeline", "".join(parts), intro=intro)
