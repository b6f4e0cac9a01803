"""The stages of ``analyze`` declare what they read and write, and the code does what they declare.

- the declared order holds: every stage reads only the store's dimensions, the ``f_*`` views, the
  setup's inventory or what an earlier stage wrote (and a shuffled order is caught);
- each module that a stage runs names in its SQL only the temp tables (``an_*``) its stages declare;
- no analysis module reads a fact table by its store name: facts go through ``f_*`` (so every
  stage runs on Parquet history as well as on the store);
- Parquet files are read in one place (``collector/parquet.py``).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from analytics import stages
from analytics.facts import FACT_TABLES
from analytics.pipeline import PART_STAGES, PIPELINE
from analytics.stages import PART_SETUP, SETUP_WRITES, Stage, check_order

ROOT = Path(__file__).resolve().parents[1]

# The modules whose functions the stages call, and the temp tables they may name: the union of
# what the stages running them declare (plus what the setup in run.py builds: an_dev and friends).
STAGE_MODULES = {
    "analytics/idle.py": ("read samples and allocations", "device buckets", "write idle_capacity"),
    "analytics/facts.py": ("day parts", "read samples and allocations"),
    "analytics/day_parts.py": ("day parts", "read samples and allocations", "device buckets"),
    "analytics/health.py": ("health", "GPU health seen", "write risk, health, placement"),
    "analytics/sample_coverage.py": ("health",),
    "analytics/early_warning.py": ("health", "GPU health seen"),
    "analytics/gpu_day.py": ("GPU health seen",),
    "analytics/isolation.py": ("isolation risk", "write risk, health, placement"),
    "analytics/fragmentation.py": ("write fragmentation",),
    "analytics/chargeback.py": ("write chargeback", "part sums"),
    "analytics/placement/run.py": ("placement", "placements seen"),
    "analytics/placement/seen.py": ("placements seen", "day parts"),
    "analytics/placement/held_pairs.py": ("placement",),
    "analytics/node_ranges.py": ("day parts",),
    "analytics/placement/stranded.py": ("placement", "GPU health seen", "day parts"),
}


def test_every_stage_reads_only_what_the_store_the_setup_or_an_earlier_stage_wrote() -> None:
    check_order(PIPELINE)
    check_order(PART_STAGES, PART_SETUP)


def test_a_stage_moved_before_what_it_reads_is_caught() -> None:
    by_name = {s.name: s for s in PART_STAGES}
    swapped = (by_name["device buckets"], by_name["read samples and allocations"])
    with pytest.raises(ValueError, match="device buckets"):
        check_order(swapped, PART_SETUP)


def test_each_stage_module_names_only_the_temp_tables_its_stages_declare() -> None:
    by_name: dict[str, Stage] = {s.name: s for s in (*PIPELINE, *PART_STAGES)}
    for module, names in STAGE_MODULES.items():
        declared = set(SETUP_WRITES)
        for n in names:
            declared |= by_name[n].reads | by_name[n].writes
        source = (ROOT / module).read_text()
        used = set(re.findall(r"\ban_[a-z_]+\b", source))
        assert used <= declared, f"{module} uses {sorted(used - declared)} without declaring it"


def test_no_stage_module_reads_a_fact_table_by_its_store_name() -> None:
    fact = "|".join(FACT_TABLES)
    by_name = re.compile(rf"\b(?:FROM|JOIN)\s+(?:{fact})\b", re.IGNORECASE)
    for module in (*STAGE_MODULES, "analytics/run.py", "analytics/queue_use.py", "analytics/inventory.py",
                   "analytics/summary.py", "analytics/stages.py"):
        hits = by_name.findall((ROOT / module).read_text())
        assert not hits, f"{module} reads {hits}: facts are read through the f_* views"


def test_parquet_files_are_read_in_one_place() -> None:
    readers = [
        str(p.relative_to(ROOT))
        for folder in ("analytics", "collector", "gpulens", "dashboards")
        for p in (ROOT / folder).rglob("*.py")
        if re.search(r"read_parquet\(", p.read_text())
    ]
    assert readers == ["collector/parquet.py"]


def test_a_value_a_stage_sets_must_be_declared() -> None:
    def rogue(s: stages.RunState) -> None:
        s.values.interval = 60.0
        s.values.parts = ["p"]

    state = stages.RunState(None, None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sets value:parts, which it does not declare"):
        stages.run_stages(state, (stages.stage("rogue", "", "value:interval")(rogue),))


def test_a_value_a_stage_reads_must_be_declared() -> None:
    def peeks(s: stages.RunState) -> None:
        s.values.interval = s.values.model_prices["H100"][0]

    state = stages.RunState(None, None, None)  # type: ignore[arg-type]
    state.values.model_prices = {"H100": (2.0, 1.5, None)}
    with pytest.raises(ValueError, match="reads value:model_prices, which it does not declare"):
        stages.run_stages(state, (stages.stage("peeks", "", "value:interval")(peeks),))
    declared = stages.stage("reads it", "value:model_prices", "value:interval")(peeks)
    stages.run_stages(state, (declared,))
    assert state.values.interval == 2.0


def test_a_value_no_stage_set_yet_is_an_error_not_a_default() -> None:
    state = stages.RunState(None, None, None)  # type: ignore[arg-type]
    with pytest.raises(LookupError, match="value:interval before any stage set it"):
        _ = state.values.interval


def test_a_value_a_stage_declares_it_writes_must_be_set() -> None:
    lazy = stages.stage("lazy", "", "value:interval value:parts")(lambda s: setattr(s.values, "parts", []))
    state = stages.RunState(None, None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"writes \['value:interval'\] but did not set them"):
        stages.run_stages(state, (lazy,))


def test_a_declared_value_that_run_values_does_not_hold_is_caught() -> None:
    typo = stages.stage("typo", "value:intervals", "")(lambda s: None)
    with pytest.raises(ValueError, match="value:intervals"):
        check_order((typo,), PART_SETUP)


def test_each_stage_names_in_its_code_exactly_the_values_it_declares() -> None:
    for st in (*PIPELINE, *PART_STAGES):
        named = {f"value:{n}" for n in re.findall(r"\.values\.([a-z_]+)", inspect.getsource(st.run))}
        declared = {n for n in st.reads | st.writes if n.startswith("value:")}
        assert named <= declared, f"stage {st.name!r} uses {sorted(named - declared)} without declaring it"
        assert declared <= named, f"stage {st.name!r} declares {sorted(declared - named)} but never uses them"


def test_a_temp_table_a_stage_leaves_behind_must_be_declared() -> None:
    import duckdb

    sneaky = stages.stage("sneaky", "", "an_declared")(
        lambda s: s.con.execute("CREATE TEMP TABLE an_other AS SELECT 1 AS x") and None
    )
    state = stages.RunState(duckdb.connect(), None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="an_other"):
        stages.run_stages(state, (sneaky,))
