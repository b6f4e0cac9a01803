"""A day cut into node ranges on separate workers (`analyze --slice I/N --node-ranges R`), merged by the central
store (`--node-ranges R --parts-from`), gives the rows of one run over the whole day, table for table, row for row.

The simulated fleet, one day at 15-minute samples in date-partitioned Parquet, with three CPU nodes in the
nodes dimension and one GPU node missing from it, so that the two ranges are cut between the two nodes of
the llama-pretrain JobSet (a multi-node workload in both ranges); MIG GPUs and shared (time-sliced, MPS)
GPUs on both sides, and collection gaps (a node's, a device's, the whole source's).
"""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path

import duckdb
import pytest

from analytics.node_ranges import NodeRange, node_ranges
from analytics.result_tables import RESULT_TABLES
from collector.backfill import backfill_simulated
from collector.parquet import export_parquet
from gpulens.core.errors import UserError
from tests.support.cli import analyze_process as cli
from tests.support.cli import finished
from tests.test_analytics_day_parts import DAY, END, at

pytestmark = pytest.mark.slow

END_ISO = at(END).strftime("%Y-%m-%dT%H:%M:%SZ")


def every_row(path: Path, run_id: str) -> dict[str, list[tuple[object, ...]]]:
    """Every result table's rows of a run (all but the run id), floats rounded to 9 digits, in one order."""
    def cell(v: object) -> object:
        if isinstance(v, float):
            return round(v, 9)
        if isinstance(v, list):
            return tuple(cell(x) for x in v)
        return v

    out = {}
    with duckdb.connect(str(path), read_only=True) as con:
        for table in RESULT_TABLES:
            rows = con.execute(f"SELECT * EXCLUDE (run_id) FROM {table} WHERE run_id = ?", [run_id]).fetchall()  # noqa: S608
            out[table] = sorted((tuple(cell(v) for v in r) for r in rows), key=repr)
    return out


def fleet(tmp_path: Path) -> tuple[Path, Path]:
    store = tmp_path / "gpulens.duckdb"
    backfill_simulated(store, None, END - DAY, END, 900.0)
    with duckdb.connect(str(store)) as con:
        con.execute("INSERT INTO nodes (node) VALUES ('cpu-0'), ('cpu-1'), ('cpu-2')")
        con.execute("DELETE FROM nodes WHERE node = 'gpu-h200-mps-0'")  # its devices and samples stay
        gpu = con.execute("SELECT min(device_id) FROM devices WHERE node = 'gpu-h200-mig-0' AND kind = 'mig'").fetchone()
        assert gpu is not None
        con.executemany("INSERT INTO gaps VALUES ('sim', ?, ?, ?, 'test')", [
            ("gpu-h100-train-0", at(END - DAY) + timedelta(hours=3), at(END - DAY) + timedelta(hours=5)),
            (gpu[0], at(END - DAY) + timedelta(hours=7), at(END - DAY) + timedelta(hours=8)),
            ("", at(END - DAY) + timedelta(hours=20), at(END - DAY) + timedelta(hours=20, minutes=30)),
        ])
    facts = tmp_path / "facts"
    export_parquet(str(store), facts)
    return store, facts


def test_two_node_range_workers_and_a_merge_give_the_single_node_rows(tmp_path: Path) -> None:
    store, facts = fleet(tmp_path)
    with duckdb.connect(str(store), read_only=True) as con:
        ranges = node_ranges(con, 2)
    assert ranges[1].lo == "gpu-h100-train-1"  # llama-pretrain's two nodes fall on both sides
    config = tmp_path / "interval.yaml"
    config.write_text("sample_interval_seconds: 900\n", encoding="utf-8")
    single = tmp_path / "single.duckdb"
    shutil.copy(store, single)
    finished(cli("--db", single, "--parquet", facts, "--window", "1d", "--end", END_ISO, "--config", config))

    workers = tmp_path / "workers"
    workers.mkdir()
    common = ("--parquet", facts, "--window", "1d", "--end", END_ISO, "--config", config, "--dimensions-from", store,
              "--node-ranges", "2")
    outs = [finished(p) for p in [cli("--db", workers / f"worker-{i}.duckdb", "--slice", f"{i}/2", *common)
                                  for i in (0, 1)]]
    assert "slice 0/2: 1 part(s) of days in 2 node ranges" in outs[0]
    assert "nodes 1/2 [- .. gpu-h100-train-1)" in outs[0] and "nodes 2/2 [gpu-h100-train-1 .. -)" in outs[1]

    central = tmp_path / "central.duckdb"
    shutil.copy(store, central)
    merged = finished(cli("--db", central, "--parquet", facts, "--window", "1d", "--end", END_ISO, "--config", config,
                          "--node-ranges", "2", "--parts-from", workers / "*.duckdb"))
    assert "days: 1 in the window, each in 2 node ranges: 2 parts, 2 reused, 0 computed" in merged
    with duckdb.connect(str(central), read_only=True) as con:
        (run_id,) = con.execute("SELECT run_id FROM analysis_runs").fetchone() or (None,)
        used = con.execute("SELECT part_id, p.parameters FROM analysis_run_parts r JOIN analysis_parts p USING (part_id) "
                           "WHERE r.run_id = ?", [run_id]).fetchall()
    with duckdb.connect(str(single), read_only=True) as con:
        (whole,) = con.execute("SELECT run_id FROM analysis_runs").fetchone() or (None,)
        whole_day = con.execute("SELECT part_id FROM analysis_run_parts WHERE run_id = ?", [whole]).fetchall()
    assert sorted(json.loads(p)["nodes"][:2] for _, p in used) == [[0, 2], [1, 2]]  # the run lists its range parts
    assert not {pid for pid, _ in used} & {pid for (pid,) in whole_day}  # a day whole and in ranges: other ids

    assert run_id == whole  # the node ranges are no parameter of the run: the same run, from other parts
    assert every_row(central, run_id) == every_row(single, whole)
    with duckdb.connect(str(single), read_only=True) as con:
        spanning = con.execute("SELECT max(nodes) FROM placement WHERE run_id = ? AND workload = 'llama-pretrain'",
                               [whole]).fetchone()
    assert spanning == (2,), "a placement over both ranges to compare"


def test_every_node_name_falls_into_exactly_one_range(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "n.duckdb")) as con:
        con.execute("CREATE TABLE nodes (node VARCHAR)")
        con.execute("INSERT INTO nodes SELECT printf('node-%02d', i) FROM range(10) t(i)")
        ranges = node_ranges(con, 3)
    assert [(r.lo, r.hi) for r in ranges] == [(None, "node-03"), ("node-03", "node-06"), ("node-06", None)]
    for name in ("a", "node-00", "node-03", "node-035", "node-05", "node-06", "node-99", "zz"):
        assert sum(r.holds(name) for r in ranges) == 1, name


def test_more_ranges_than_nodes_and_ranges_without_a_sample_interval_are_refused(tmp_path: Path) -> None:
    with duckdb.connect(str(tmp_path / "n.duckdb")) as con:
        con.execute("CREATE TABLE nodes (node VARCHAR)")
        con.execute("INSERT INTO nodes VALUES ('a'), ('b')")
        with pytest.raises(UserError) as err:
            node_ranges(con, 3)
    assert str(err.value) == ("--node-ranges 3: the store's nodes dimension lists 2 node(s); give at most that many "
                              "ranges")
    store = tmp_path / "s.duckdb"
    backfill_simulated(store, None, END - DAY, END - DAY + 3600, 900.0)
    run = cli("--db", store, "--window", "1d", "--end", END_ISO, "--node-ranges", "2")
    _, stderr = run.communicate(timeout=300)
    assert (run.returncode, stderr.strip()) == (2, "gpulens: error: --node-ranges needs sample_interval_seconds "
                                                   "(--config interval.yaml): a node range's sample spacing is not its day's")


def test_a_name_with_a_quote_is_a_literal() -> None:
    assert NodeRange(1, 3, "o'neil", None).sql("d.node") == "d.node >= 'o''neil'"


def test_a_workload_multi_device_in_one_range_and_single_gpu_in_another_is_named_at_the_merge(tmp_path: Path) -> None:
    """A range keeps the per-sample rows only of owners that look multi-device there; an owner whose 2-GPU pod
    is in one range and whose 1-GPU pod is in the other has its placements without the latter: the merge
    names it rather than hide it."""
    store, facts = fleet(tmp_path)
    with duckdb.connect(str(store)) as con:
        con.execute("UPDATE allocation_claims SET namespace = 'ns-split', workload_kind = 'Deployment', "
                    "workload_name = 'split' WHERE pod LIKE 'bert-distill-0-%'")  # 2 GPUs, range 1
        con.execute("UPDATE allocation_claims SET namespace = 'ns-split', workload_kind = 'Deployment', "
                    "workload_name = 'split', pod = 'split-b' WHERE gpu_uuid = "  # 1 GPU, range 2
                    "(SELECT min(gpu_uuid) FROM allocation_claims WHERE pod LIKE 'rl-reward-0-%')")
    export_parquet(str(store), facts)
    config = tmp_path / "interval.yaml"
    config.write_text("sample_interval_seconds: 900\n", encoding="utf-8")
    workers = tmp_path / "workers"
    workers.mkdir()
    common = ("--parquet", facts, "--window", "1d", "--end", END_ISO, "--config", config, "--dimensions-from", store,
              "--node-ranges", "2")
    for proc in [cli("--db", workers / f"worker-{i}.duckdb", "--slice", f"{i}/2", *common) for i in (0, 1)]:
        finished(proc)
    central = tmp_path / "central.duckdb"
    shutil.copy(store, central)
    proc = cli("--db", central, "--parquet", facts, "--window", "1d", "--end", END_ISO, "--config", config,
               "--node-ranges", "2", "--parts-from", workers / "*.duckdb")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "gpulens: note: 1 workload(s) held 2+ GPUs in one pod in one node range" in err
    assert "ns-split/Deployment/split on " in err and "without --node-ranges" in err
