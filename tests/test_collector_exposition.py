"""Exposition parsing and the gpulens / dcgm-exporter mapping into store frames, units normalized."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from collector.exposition import ExpositionError, escape_label_value, parse_exposition
from collector.mapping import MIB, to_store_frames
from collector.store import Store
from tests.support.store_render import render_text, series_for
from tests.support.synthetic_fleet import HOSTILE, synthetic_frames

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"
T0 = 1_790_000_000.0
SCRAPE_MS = int(T0 * 1000)


def _frames_of(path: Path, schema: str = "auto") -> dict[str, pl.DataFrame]:
    long = parse_exposition(path.read_text(), str(path)).with_columns(pl.col("ts_ms").fill_null(SCRAPE_MS))
    return to_store_frames(long, schema, "scrape")  # type: ignore[arg-type]


def test_label_values_with_escapes_are_unescaped() -> None:
    text = 'm{a="q\\"uote",b="back\\\\slash",c="new\\nline",d="plain"} 1\n'
    row = parse_exposition(text).row(0, named=True)
    assert (row["a"], row["b"], row["c"], row["d"]) == ('q"uote', "back\\slash", "new\nline", "plain")


def test_escape_and_unescape_round_trip_hostile_strings() -> None:
    text = f'm{{pod="{escape_label_value(HOSTILE)}"}} 2.5 1700000000000\n'
    row = parse_exposition(text).row(0, named=True)
    assert row["pod"] == HOSTILE
    assert (row["value"], row["ts_ms"]) == (2.5, 1_700_000_000_000)


def test_label_values_holding_separators_parse_exactly() -> None:
    text = 'm{a="",b="x=y=z",c="{open",d="close}",e="q\\",r=\\"",f="a\\"}"} 1\n'
    row = parse_exposition(text).row(0, named=True)
    assert [row[k] for k in "abcdef"] == ["", "x=y=z", "{open", "close}", 'q",r="', 'a"}']


def test_special_values_parse_as_floats() -> None:
    long = parse_exposition("a 1e3\nb +Inf\nc -Inf\nd NaN\n")
    values = long["value"].to_list()
    assert values[:3] == [1000.0, float("inf"), float("-inf")] and values[3] != values[3]


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ('ok 1\n# HELP x\nbroken{a="1" 2\n', 3, "not a valid sample line"),
        ("ok 1\n\nvalue_missing\n", 3, "not a valid sample line"),
        ("ok 1\nbad_value{} one\n", 2, "invalid sample value"),
        ('dup{a="1",a="2"} 1\n', 1, "appears twice"),
    ],
)
def test_a_malformed_line_is_reported_with_target_and_line(text: str, line: int, what: str) -> None:
    with pytest.raises(ExpositionError, match=what) as err:
        parse_exposition(text, "http://node-3:9400/metrics")
    assert err.value.line == line
    assert str(err.value).startswith(f"http://node-3:9400/metrics: line {line}: ")


def test_dcgm_units_become_base_units() -> None:
    frames = _frames_of(FIXTURES / "h100_whole_gpu.prom", "dcgm")
    busy = frames["device_samples"].filter(pl.col("device_id").str.ends_with("0001")).row(0, named=True)
    assert busy["activity_ratio"] == pytest.approx(0.823456)  # GR_ENGINE_ACTIVE wins over GPU_UTIL (87 %)
    assert busy["memory_used_bytes"] == 60080 * MIB
    assert busy["memory_total_bytes"] == (60080 + 20480 + 519) * MIB
    gpu = frames["gpu_samples"].filter(pl.col("gpu_uuid").str.ends_with("0001")).row(0, named=True)
    assert gpu["energy_joules"] == pytest.approx(123456789.012)
    assert gpu["sm_clock_hz"] == 1980e6 and gpu["memory_clock_hz"] == 2619e6
    assert gpu["power_watts"] == 612.5 and gpu["temperature_celsius"] == 61
    other = frames["gpu_samples"].filter(pl.col("gpu_uuid").str.ends_with("0002")).row(0, named=True)
    assert other["remapped_rows_failure"] is True and other["pcie_replay_total"] == 3


def test_dcgm_gpu_util_percent_is_a_ratio_when_no_profiling_metric() -> None:
    text = (FIXTURES / "h100_whole_gpu.prom").read_text()
    text = "\n".join(line for line in text.splitlines() if "GR_ENGINE_ACTIVE" not in line)
    long = parse_exposition(text, "t").with_columns(pl.col("ts_ms").fill_null(SCRAPE_MS))
    frames = to_store_frames(long, "dcgm", "scrape")
    busy = frames["device_samples"].filter(pl.col("device_id").str.ends_with("0001"))
    assert busy["activity_ratio"].item() == pytest.approx(0.87)


def test_dcgm_holders_and_xid_events() -> None:
    frames = _frames_of(FIXTURES / "h100_whole_gpu.prom", "dcgm")
    alloc = frames["allocations"].row(0, named=True)
    assert (alloc["namespace"], alloc["pod"], alloc["container"], alloc["tenant"]) == (
        "team-a", "llm-train-0", "trainer", "team-a")
    assert alloc["gpu_equivalents"] == 1.0 and frames["allocations"].height == 1  # the idle GPU has no holder
    event = frames["events"].row(0, named=True)
    assert (event["kind"], event["code"]) == ("xid", 79) and event["gpu_uuid"].endswith("0002")


def test_dcgm_mig_instances_use_exported_labels_and_lower_case_hostname() -> None:
    frames = _frames_of(FIXTURES / "h200_mig.prom", "dcgm")
    devices = frames["devices"].sort("gpu_instance_id")
    assert devices["device_id"].to_list() == [
        "GPU-aa11bb22-0000-4000-8000-0000000000c8/gi1",
        "GPU-aa11bb22-0000-4000-8000-0000000000c8/gi9",
    ]
    assert devices["profile"].to_list() == ["3g.71gb", "1g.18gb"]
    assert devices["gpu_equivalents"].to_list() == pytest.approx([3 / 7, 1 / 7])
    assert set(devices["node"]) == {"h200-node-1"}
    alloc = frames["allocations"]
    # Only the workload holds a device: dcgm-exporter's own pod (target label) is not a holder.
    assert alloc.select("device_id", "namespace", "pod", "container").rows() == [
        ("GPU-aa11bb22-0000-4000-8000-0000000000c8/gi1", "team-b", "inference-7d9f", "server")
    ]
    assert frames["gpu_samples"].height == 1  # physical readings once per GPU, not per instance


def test_schema_choice_filters_the_other_naming() -> None:
    frames = _frames_of(FIXTURES / "h100_whole_gpu.prom", "gpulens")
    assert frames == {}


def test_gpulens_names_map_into_the_same_tables_exactly() -> None:
    truth = synthetic_frames(T0, T0 + 300, 60.0)
    text = render_text(series_for(truth, "gpulens"), timestamps=True)
    frames = to_store_frames(parse_exposition(text, "t"), "gpulens", "scrape")
    for table, keys in (("device_samples", ["device_id", "ts"]), ("gpu_samples", ["gpu_uuid", "ts"])):
        want = truth[table].drop("source").sort(keys)
        got = frames[table].select(want.columns).sort(keys)
        assert got.equals(want), table
    want_alloc = truth["allocations"].drop("source").sort("device_id", "ts")
    assert frames["allocations"].select(want_alloc.columns).sort("device_id", "ts").equals(want_alloc)


def test_hostile_label_values_survive_end_to_end_into_the_store(tmp_path: Path) -> None:
    truth = synthetic_frames(T0, T0 + 120, 60.0, hostile_tenant=True)
    text = render_text(series_for(truth, "gpulens"), timestamps=True)
    frames = to_store_frames(parse_exposition(text, "t"), "gpulens", "scrape")
    with Store(str(tmp_path / "s.duckdb")) as store:
        store.ingest_window("scrape:t", T0, T0 + 120, frames)
        tenants = store.query("SELECT DISTINCT tenant, namespace FROM allocations")
        assert tenants == [(HOSTILE, HOSTILE)]
        assert store.query("SELECT count(*) FROM allocations WHERE tenant = ?", [HOSTILE]) == [(12,)]
        assert store.count("device_samples") == 16  # the "DROP TABLE" in the tenant stayed data


def test_gpulens_xid_series_become_one_event_per_last_seen_instant() -> None:
    text = "".join(
        f'gpulens_gpu_xid_errors_total{{node="n",gpu="GPU-1",xid="{code}"}} {total} {ms}\n'
        f'gpulens_gpu_xid_last_seen_timestamp_seconds{{node="n",gpu="GPU-1",xid="{code}"}} {seen} {ms}\n'
        for code, total, seen, ms in ((79, 1, T0 - 5, SCRAPE_MS), (79, 1, T0 - 5, SCRAPE_MS + 15000),
                                      (13, 2, T0 + 10, SCRAPE_MS + 15000))
    )
    events = to_store_frames(parse_exposition(text, "t"), "gpulens", "scrape")["events"].sort("code")
    assert events.select("gpu_uuid", "kind", "code", "detail").rows() == [
        ("GPU-1", "xid", 13, "counter total 2"), ("GPU-1", "xid", 79, "counter total 1")]
    assert [t.timestamp() for t in events["ts"].dt.replace_time_zone("UTC")] == [T0 + 10, T0 - 5]
