"""The dcgm-exporter name table: generated from NVIDIA's dcgm_fields.h, and what the collector reads from it."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

from collector import dcgm_names
from collector.dcgm_fields import INGESTED, KNOWN_NAMES, READ_AS, UNITS
from collector.mapping import DCGM_METRICS

ROOT = Path(__file__).resolve().parents[1]


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_dcgm_names", ROOT / "scripts" / "gen_dcgm_names.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_dcgm_names"] = module
    spec.loader.exec_module(module)
    return module


HEADER_EXCERPT = """\
/**
 * GPU Utilization
 */
#define DCGM_FI_DEV_GPU_UTIL_RATIO 203
#define DCGM_FI_DEV_FB_TOTAL 250
#define DCGM_FI_DEV_FB_USED 252
#define DCGM_FI_DEV_BOARD_POWER_WATTS 155
#define DCGM_FI_PROF_PCIE_TX_BYTES 1009
#define DCGM_FI_PROF_PCIE_RX_BYTES 1010
#define DCGM_FI_PROF_NVLINK_TX_BYTES 1011
#define DCGM_FI_PROF_NVLINK_RX_BYTES 1012
#if DCGM_DEPRECATED
#define DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL    DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL
// Deprecated: renamed per DCGM Field Naming Standard (see dcgmlib/dcgm_field_naming.py)
#define DCGM_FI_DEV_POWER_USAGE        DCGM_FI_DEV_BOARD_POWER_WATTS     //  155
#define DCGM_FI_DEV_GPU_UTIL           DCGM_FI_DEV_GPU_UTIL_RATIO        //  203
#endif
"""


def test_every_old_name_maps_to_exactly_one_new_name_and_no_new_name_has_two_old_ones() -> None:
    renamed = {**dcgm_names.RENAMED, **dcgm_names.EXPORTER_RENAMED}
    assert len(renamed) == len(dcgm_names.RENAMED) + len(dcgm_names.EXPORTER_RENAMED)  # no old name twice
    twice = [new for new, n in Counter(renamed.values()).items() if n > 1]
    assert twice == []
    assert not set(renamed) & set(renamed.values())  # no name is both old and new


def test_every_renamed_field_keeps_its_field_id() -> None:
    for old, new in dcgm_names.RENAMED.items():
        assert new in dcgm_names.FIELD_IDS, (old, new)
    for new, fid in dcgm_names.EXPORTER_FIELD_IDS.items():
        old = next(o for o, n in dcgm_names.EXPORTER_RENAMED.items() if n == new)
        assert dcgm_names.FIELD_IDS.get(old, dcgm_names.FIELD_IDS.get(dcgm_names.RENAMED.get(old, ""))) == fid


def test_the_old_and_new_name_of_every_ingested_field_convert_to_the_same_base_unit() -> None:
    for field in INGESTED:
        assert field.legacy_unit in UNITS, field
        if field.new is not None:
            assert field.new_unit in UNITS, field
            assert UNITS[field.legacy_unit].base == UNITS[str(field.new_unit)].base, field


def test_every_unit_a_new_name_states_converts_to_a_base_unit() -> None:
    assert set(dcgm_names.NEW_NAME_UNITS.values()) <= set(UNITS)
    assert dcgm_names.NEW_NAME_UNITS["DCGM_FI_DEV_GPU_TEMP_CELSIUS"] == "degC"
    assert dcgm_names.NEW_NAME_UNITS["DCGM_FI_DEV_NVLINK_TX_BYTES_TOTAL"] == "bytes"


def test_every_name_the_collector_ingests_is_in_the_table() -> None:
    assert set(DCGM_METRICS) == set(READ_AS)
    assert set(DCGM_METRICS) <= KNOWN_NAMES
    for field in INGESTED:  # the pre-4.9 name is either a current field or one the table renames
        assert field.legacy in dcgm_names.FIELD_IDS or field.new is not None, field.legacy


def test_units_that_changed_in_4_9_are_converted_by_the_name_read() -> None:
    util = READ_AS["DCGM_FI_DEV_GPU_UTIL"][1], READ_AS["DCGM_FI_DEV_GPU_UTIL_RATIO"][1]
    assert (42 * util[0].scale, 0.42 * util[1].scale) == (0.42, 0.42)
    total = READ_AS["DCGM_FI_DEV_FB_TOTAL"][1], READ_AS["DCGM_FI_DEV_FB_CAPACITY_BYTES"][1]
    assert 80 * total[0].scale == 80 * 1024 * 1024 * total[1].scale


def test_the_committed_table_says_which_dcgm_header_it_came_from() -> None:
    text = (ROOT / "collector" / "dcgm_names.py").read_text()
    assert f"DCGM {dcgm_names.DCGM_VERSION}, commit" in text and dcgm_names.DCGM_COMMIT in text
    assert len(dcgm_names.DCGM_COMMIT) == 40


def test_the_generator_reads_renames_fields_and_units_from_a_header(tmp_path: Path) -> None:
    gen = _generator()
    header = tmp_path / "dcgm_fields.h"
    header.write_text(HEADER_EXCERPT)
    out = tmp_path / "names.py"
    assert gen.main([str(header), "--version", "9.9.9", "--commit", "c" * 40, "--out", str(out)]) == 0
    namespace: dict[str, object] = {}
    exec(out.read_text(), namespace)  # noqa: S102 - the module the generator just wrote
    assert namespace["RENAMED"] == {"DCGM_FI_DEV_POWER_USAGE": "DCGM_FI_DEV_BOARD_POWER_WATTS",
                                    "DCGM_FI_DEV_GPU_UTIL": "DCGM_FI_DEV_GPU_UTIL_RATIO"}
    assert namespace["FIELD_IDS"]["DCGM_FI_DEV_FB_USED"] == 252  # type: ignore[index]
    assert namespace["OTHER_ALIASES"] == {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL"}
    units = namespace["NEW_NAME_UNITS"]
    assert units["DCGM_FI_DEV_GPU_UTIL_RATIO"] == "ratio" and units["DCGM_FI_DEV_BOARD_POWER_WATTS"] == "W"  # type: ignore[index]
    assert units["DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND"] == "B/s"  # type: ignore[index]
    assert "DCGM 9.9.9, commit" in out.read_text()


def test_the_generator_refuses_a_header_whose_rename_points_at_another_field_id(tmp_path: Path) -> None:
    gen = _generator()
    header = tmp_path / "dcgm_fields.h"
    header.write_text(HEADER_EXCERPT.replace("//  203", "//  204"))
    assert gen.main([str(header), "--version", "x", "--commit", "c", "--out", str(tmp_path / "o.py")]) == 2
    assert not (tmp_path / "o.py").exists()


def test_the_committed_table_is_what_the_generator_makes_of_its_own_header_facts() -> None:
    """Regenerating from the same facts reproduces the table (no hand edits): the renames and units written
    in the committed module are the generator's rendering of them."""
    gen = _generator()
    renames = [(old, new, dcgm_names.FIELD_IDS[new]) for old, new in dcgm_names.RENAMED.items()]
    text = gen.render(dict(dcgm_names.FIELD_IDS), renames, dict(dcgm_names.OTHER_ALIASES),
                      dcgm_names.DCGM_VERSION, dcgm_names.DCGM_COMMIT)
    assert text == (ROOT / "collector" / "dcgm_names.py").read_text()
