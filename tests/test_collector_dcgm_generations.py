"""Both dcgm-exporter naming generations make the same store rows, in base units; each target says which it speaks."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from collector.dcgm_generation import MIXED, PRE_4_9, UNTOLD, V4_9_OR_LATER, V4_10_OR_LATER, speaks
from collector.exposition import parse_exposition
from collector.mapping import MIB, to_store_frames
from collector.store import Store

FIXTURES = Path(__file__).parent / "fixtures" / "dcgm"
PRE = FIXTURES / "a100_mixed_pre_4_9.prom"
NEW = FIXTURES / "a100_mixed_4_10.prom"
SCRAPE_MS = 1_790_000_000_000

NOT_NAMED_BY_THE_TABLE = {
    "device_samples": ("memory_used_bytes",),
    "gpu_samples": ("energy_joules", "sm_clock_hz", "memory_clock_hz"),
}
"""Columns whose 4.9+ field names DCGM 4.7 chose after the DCGM 4.6.0 header the table comes from."""


def _long(path: Path) -> pl.DataFrame:
    return parse_exposition(path.read_text(), str(path)).with_columns(pl.col("ts_ms").fill_null(SCRAPE_MS))


def _stored(path: Path, db: Path) -> dict[str, pl.DataFrame]:
    frames = to_store_frames(_long(path), "dcgm", "scrape")
    with Store(str(db)) as store:
        store.ingest_window("scrape", SCRAPE_MS / 1000, SCRAPE_MS / 1000, frames, (), now=SCRAPE_MS / 1000)
        out = {}
        for table, keys in (("device_samples", ["device_id"]), ("gpu_samples", ["gpu_uuid"]),
                            ("allocations", ["device_id"]), ("events", ["gpu_uuid"]), ("devices", ["device_id"]),
                            ("gpus", ["gpu_uuid"]), ("nodes", ["node"])):
            cursor = store.con.execute(f"SELECT * FROM {table}")  # noqa: S608 - fixed table names
            columns = [d[0] for d in cursor.description]
            out[table] = pl.DataFrame(cursor.fetchall(), schema=columns, orient="row").sort(keys)
    return out


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, pl.DataFrame], dict[str, pl.DataFrame]]:
    base = tmp_path_factory.mktemp("generations")
    return _stored(PRE, base / "pre.duckdb"), _stored(NEW, base / "new.duckdb")


@pytest.mark.parametrize("table", ["device_samples", "gpu_samples", "allocations", "events", "devices", "gpus",
                                   "nodes"])
def test_both_generations_store_identical_rows_in_base_units(
        both: tuple[dict[str, pl.DataFrame], dict[str, pl.DataFrame]], table: str) -> None:
    pre, new = both
    drop = [c for c in NOT_NAMED_BY_THE_TABLE.get(table, ()) if c in pre[table].columns]
    assert pre[table].height > 0
    assert pre[table].drop(drop).equals(new[table].drop(drop)), (pre[table], new[table])


def test_what_the_new_generation_does_not_name_is_unmeasured_never_zero(
        both: tuple[dict[str, pl.DataFrame], dict[str, pl.DataFrame]]) -> None:
    pre, new = both
    for table, columns in NOT_NAMED_BY_THE_TABLE.items():
        for column in columns:
            assert new[table][column].null_count() == new[table].height, (table, column)
            assert pre[table][column].null_count() == 0, (table, column)


def test_values_are_in_base_units_whatever_the_name_they_were_read_under(
        both: tuple[dict[str, pl.DataFrame], dict[str, pl.DataFrame]]) -> None:
    pre, new = both
    for stored in (pre, new):
        whole = stored["device_samples"].filter(pl.col("device_id") == "GPU-5f1c2a90-0000-4000-8000-00000000a100")
        assert whole["activity_ratio"].to_list() == [0.625]  # GR_ENGINE wins over GPU_UTIL (75 % / 0.75)
        assert whole["memory_total_bytes"].to_list() == [(20480 + 60330 + 190) * MIB]
        assert whole["activity_signal"].to_list() == ["DCGM_FI_PROF_GR_ENGINE_ACTIVE"]
        gpu0 = stored["gpu_samples"].row(0, named=True)
        assert (gpu0["power_watts"], gpu0["temperature_celsius"], gpu0["pcie_replay_total"]) == (312.5, 61.0, 3)
        assert stored["events"]["code"].to_list() == [79]
    assert pre["device_samples"].sort("device_id")["memory_used_bytes"].to_list()[0] == 20480 * MIB
    gpu0 = pre["gpu_samples"].row(0, named=True)
    assert (gpu0["energy_joules"], gpu0["sm_clock_hz"]) == (pytest.approx(123456.789), 1410e6)


def test_gpu_util_alone_is_a_ratio_in_both_generations() -> None:
    def activity(text: str) -> float:
        long = parse_exposition(text).with_columns(pl.col("ts_ms").fill_null(SCRAPE_MS))
        return to_store_frames(long, "dcgm", "scrape")["device_samples"]["activity_ratio"].item()

    labels = '{gpu="0",UUID="GPU-1",Hostname="n1"}'
    assert activity(f"DCGM_FI_DEV_GPU_UTIL{labels} 42\n") == pytest.approx(0.42)
    assert activity(f"DCGM_FI_DEV_GPU_UTIL_RATIO{labels} 0.42\n") == pytest.approx(0.42)


@pytest.mark.parametrize(("path", "generation"), [(PRE, PRE_4_9), (NEW, V4_10_OR_LATER)])
def test_each_fixture_says_its_generation_without_warnings(path: Path, generation: str) -> None:
    assert speaks(_long(path)).generation == generation
    assert speaks(_long(path)).warnings == ()


def test_the_new_driver_label_alone_tells_4_9_or_later() -> None:
    long = parse_exposition('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",DCGM_FI_SYSTEM_DRIVER_VERSION="580"} 1\n')
    assert speaks(long).generation == V4_9_OR_LATER
    old = parse_exposition('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",DCGM_FI_DRIVER_VERSION="580"} 1\n')
    assert speaks(old).generation == PRE_4_9
    neither = parse_exposition('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1"} 1\n')
    assert speaks(neither).generation == UNTOLD


def test_a_scrape_that_mixes_generations_is_a_warning_naming_both_sides() -> None:
    text = ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 42\n'
            'DCGM_FI_DEV_BOARD_POWER_WATTS{gpu="0",UUID="GPU-1"} 300\n')
    result = speaks(parse_exposition(text))
    assert result.generation == MIXED
    assert len(result.warnings) == 1
    assert "DCGM_FI_DEV_GPU_UTIL" in result.warnings[0] and "DCGM_FI_DEV_BOARD_POWER_WATTS" in result.warnings[0]


def test_a_scrape_with_none_of_the_known_names_is_a_warning_not_a_silent_gap() -> None:
    result = speaks(parse_exposition('DCGM_FI_DEV_BRAND_NEW_THING{gpu="0",UUID="GPU-1"} 7\n'))
    assert any("none of the fields gpulens reads" in w for w in result.warnings)
    assert any("does not know" in w and "DCGM_FI_DEV_BRAND_NEW_THING" in w for w in result.warnings)


def test_a_gpulens_exporter_target_speaks_gpulens_and_an_unrelated_one_nothing() -> None:
    assert speaks(parse_exposition('gpulens_gpu_up{gpu="GPU-1"} 1\n')).generation == "gpulens exporter"
    assert speaks(parse_exposition("kueue_pending_workloads 3\n")).generation is None


def test_a_target_upgraded_during_a_collection_is_said_to_speak_both_in_order_and_each_warning_once() -> None:
    from collector.dcgm_generation import TargetGenerations, speaks_by_target

    before = parse_exposition('DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1",instance="n1:9400"} 42\n')
    mixed = parse_exposition('DCGM_FI_DEV_GPU_UTIL{UUID="GPU-1",instance="n1:9400"} 42\n'
                             'DCGM_FI_DEV_GPU_UTIL_RATIO{UUID="GPU-1",instance="n1:9400"} 0.42\n')
    after = parse_exposition('DCGM_FI_DEV_GPU_UTIL_RATIO{UUID="GPU-1",instance="n1:9400"} 0.42\n')
    seen = TargetGenerations.empty()
    for chunk in (before, mixed, mixed, after):
        seen.add(speaks_by_target(chunk))
    assert seen.lines() == [f"target n1:9400: speaks {PRE_4_9}, then {MIXED}, then {V4_9_OR_LATER}"]
    assert len(seen.warnings) == 1 and next(iter(seen.warnings)).startswith("n1:9400: mixes dcgm-exporter")
