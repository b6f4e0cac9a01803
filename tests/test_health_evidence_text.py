"""Health evidence reads with what was found first: drain and warn items lead, "not measured" comes once, last."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from dashboards.report.data import StoreReader
from dashboards.report.evidence_text import evidence_line
from tests.support.report_store import build_store

UNMEASURED = {"signal": "not_measured", "value": 2, "threshold": None, "severity": "unmeasured",
              "reason": "no readings in the window for row_remap_failure, nvlink_crc_rate: not checked"}
ECC = {"signal": "ecc_double_bit", "value": 4, "threshold": 0, "severity": "drain",
       "reason": "4 new double-bit ECC error(s)"}
THERMAL = {"signal": "thermal_violation_seconds", "value": 900, "threshold": 600, "severity": "warn",
           "reason": "900 s of thermal violation"}


def node_evidence() -> str:
    """A node's row as ``analyze`` writes it: each of its 8 GPUs' items in turn, the failing GPU's last."""
    items = [{**UNMEASURED, "gpu_uuid": f"GPU-{i}"} for i in range(8)]
    items += [{**THERMAL, "gpu_uuid": "GPU-7"}, {**ECC, "gpu_uuid": "GPU-7"}]
    return json.dumps(items)


def test_a_nodes_evidence_leads_with_what_was_found_worst_first_and_says_not_measured_once() -> None:
    assert evidence_line(node_evidence()) == (
        "ecc_double_bit: 4 new double-bit ECC error(s); thermal_violation_seconds: 900 s of thermal violation; "
        "not measured: no readings in the window for row_remap_failure, nvlink_crc_rate: not checked (on 8 GPUs)")
    assert evidence_line("[]") == ""


def test_the_report_and_the_dashboard_read_health_evidence_found_first(tmp_path: Path) -> None:
    path = build_store(tmp_path / "gpulens.duckdb")
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE health SET evidence = ? WHERE scope = 'node'", [node_evidence()])
    reader = StoreReader.open(path)
    try:
        (line,) = reader.health().filter(scope="node")["evidence"].to_list()
    finally:
        reader.close()
    assert line.startswith("ecc_double_bit: ") and line.count("not measured") == 1
