"""history(): determinism, agreement with node_snapshot, store-shaped frames that load into real DuckDB."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import duckdb
import polars as pl
import pytest

from collector.allocation_claims import add_sample_rows
from collector.schema import ALL_TABLES, STORED_AS_CLAIMS, create_schema
from gpulens.core.errors import UserError
from gpulens.sim.fleet import SimulatedFleet
from gpulens.sim.history import COLUMNS, SimulatedHistory, snapshot_rows, to_ts
from gpulens.sim.scenario_file import load_scenario
from tests.support.sim_fleet import default_fleet, default_scenario

DAY = 86400.0
DUCK_TO_POLARS: dict[str, object] = {
    "TIMESTAMP": pl.Datetime("us"), "VARCHAR": pl.String, "DOUBLE": pl.Float64, "BIGINT": pl.Int64,
    "INTEGER": pl.Int32, "BOOLEAN": pl.Boolean, "JSON": pl.String, "VARCHAR[]": pl.List(pl.String),
}


@pytest.fixture(scope="module")
def window() -> tuple[float, float]:
    """Six hours around the XID 79 on gpu-h100-train-1 (epoch + 3 days), crossing batch slot ends."""
    start = default_scenario().epoch_seconds + 3 * DAY - 2 * 3600
    return start, start + 6 * 3600


@pytest.fixture(scope="module")
def history(window: tuple[float, float]) -> SimulatedHistory:
    return default_fleet().history(window[0], window[1], 60)


def schema_columns(table: str) -> dict[str, object]:
    cols: dict[str, object] = {}
    for line in ALL_TABLES[table].splitlines():
        line = line.split("--")[0].strip().rstrip(",")
        match = re.match(r"^(\w+)\s+(VARCHAR\[\]|[A-Z]+)", line)
        if match and match.group(1) != "PRIMARY":
            cols[match.group(1)] = DUCK_TO_POLARS[match.group(2)]
    return cols


def test_every_frame_has_the_columns_and_types_of_its_store_table(history: SimulatedHistory) -> None:
    for name, frame in history.frames().items():
        expected = schema_columns(name)
        assert dict(frame.schema) == expected, name
        assert dict(COLUMNS[name]) == expected
        if "source" in frame.columns and frame.height:
            assert frame["source"].unique().to_list() == ["sim"]


def test_the_frames_load_into_the_real_store_without_breaking_a_key(history: SimulatedHistory) -> None:
    con = duckdb.connect(":memory:")
    create_schema(con)
    for name, frame in history.frames().items():
        con.register("frame", frame.to_arrow())
        if name in STORED_AS_CLAIMS:  # stored as claims, read back as these rows
            add_sample_rows(con, "SELECT * FROM frame")
        else:
            con.execute(f"INSERT INTO {name} SELECT * FROM frame").fetchall()  # noqa: S608 - table names are ours
        con.unregister("frame")
        assert con.execute(f"SELECT count(*) FROM {name}").fetchall() == [(frame.height,)]  # noqa: S608
    down = con.execute("SELECT count(*) FROM gpu_samples WHERE NOT up AND power_watts IS NULL").fetchall()
    assert down == [(45,)]


def test_history_at_a_time_equals_the_snapshot_at_that_time(
    history: SimulatedHistory, window: tuple[float, float]
) -> None:
    fleet = default_fleet()
    start = window[0]
    # During the XID 79 outage, at a batch slot boundary, and a minute before it.
    times = [start + 2 * 3600 + 600, start + 3 * 3600, start + 3 * 3600 - 60, start]
    for t in times:
        ts = datetime.fromtimestamp(t, tz=UTC).replace(tzinfo=None)
        for node in fleet.node_names():
            expected = snapshot_rows(fleet.node_snapshot(node, t))
            for table, rows in expected.items():
                frame = getattr(history, table).filter((pl.col("ts") == ts) & (pl.col("node") == node))
                want = pl.DataFrame(rows, schema=COLUMNS[table], orient="row")
                key = ["device_id", "pod"] if table == "allocations" else (
                    ["device_id"] if table == "device_samples" else ["gpu_uuid"])
                got = frame.sort(key)
                want = want.sort(key)
                assert got.equals(want), f"{table} differs on {node} at {ts}"


def test_the_same_seed_gives_the_same_history_and_another_seed_does_not() -> None:
    scenario = default_scenario()
    start = scenario.epoch_seconds + 20 * DAY
    a = SimulatedFleet(scenario).history(start, start + 7200, 60)
    b = SimulatedFleet(load_scenario(None)).history(start, start + 7200, 60)
    for name in COLUMNS:
        assert getattr(a, name).equals(getattr(b, name)), name
    other = SimulatedFleet(scenario.model_copy(update={"seed": scenario.seed + 1})).history(start, start + 7200, 60)
    assert not other.device_samples.equals(a.device_samples)
    assert set(other.gpus["gpu_uuid"]).isdisjoint(set(a.gpus["gpu_uuid"]))
    changed = other.gpu_samples["power_watts"] != a.gpu_samples["power_watts"]
    assert changed.sum() > 0.9 * a.gpu_samples.height


def test_history_can_be_evaluated_in_any_order_and_any_piece() -> None:
    fleet, scenario = default_fleet(), default_scenario()
    start = scenario.epoch_seconds + 40 * DAY
    whole = fleet.history(start, start + 4 * 3600, 300, nodes=["gpu-h100-ts-0"])
    later = fleet.history(start + 2 * 3600, start + 4 * 3600, 300, nodes=["gpu-h100-ts-0"])
    earlier = fleet.history(start, start + 2 * 3600, 300, nodes=["gpu-h100-ts-0"])
    for table in ("device_samples", "gpu_samples", "allocations"):
        joined = pl.concat([getattr(earlier, table), getattr(later, table)])
        key = ["ts", "device_id", "pod"] if table == "allocations" else ["ts", "gpu_uuid"]
        if table == "device_samples":
            key = ["ts", "device_id"]
        assert joined.sort(key).equals(getattr(whole, table).sort(key))


def test_events_list_the_scheduled_xids_in_the_window(history: SimulatedHistory) -> None:
    scenario = default_scenario()
    events = history.events
    xid79 = events.filter(pl.col("code") == 79)
    assert xid79.height == 1
    assert xid79["ts"][0] == datetime.fromtimestamp(scenario.epoch_seconds + 3 * DAY, tz=UTC).replace(tzinfo=None)
    assert xid79["node"][0] == "gpu-h100-train-1"
    assert events["kind"].unique().to_list() == ["xid"]


def test_allocation_shares_per_physical_gpu_never_exceed_one(history: SimulatedHistory) -> None:
    per_gpu = history.allocations.group_by("ts", "gpu_uuid").agg(pl.col("gpu_equivalents").sum())
    assert float(per_gpu["gpu_equivalents"].max()) <= 1.0 + 1e-9  # type: ignore[arg-type]
    ts_shares = history.allocations.filter(pl.col("sharing_mode") == "time-slicing")["gpu_equivalents"].unique()
    assert ts_shares.to_list() == [0.25]


def test_split_gpu_instance_memory_is_on_the_first_compute_instance_only(history: SimulatedHistory) -> None:
    devices = history.devices.filter(pl.col("profile") == "2g.35gb")
    assert devices.height == 4 and set(devices["compute_instance_id"]) == {0, 1}
    samples = history.device_samples.join(devices.select("device_id", "compute_instance_id"), on="device_id")
    first = samples.filter(pl.col("compute_instance_id") == 0)
    second = samples.filter(pl.col("compute_instance_id") == 1)
    assert first["memory_used_bytes"].null_count() == 0
    assert second["memory_used_bytes"].null_count() == second.height
    assert second["activity_ratio"].null_count() == 0


def test_a100_mig_activity_is_null_in_history(history: SimulatedHistory) -> None:
    a100 = history.device_samples.filter(pl.col("node") == "gpu-a100-mig-0")
    assert a100.height > 0 and a100["activity_ratio"].null_count() == a100.height
    h200 = history.device_samples.filter(pl.col("node") == "gpu-h200-mig-0")
    assert h200["activity_ratio"].null_count() == 0


def test_inventory_frames_match_cluster_state_every_five_minutes(
    history: SimulatedHistory, window: tuple[float, float]
) -> None:
    fleet = default_fleet()
    inventory_ts = history.pod_snapshots["ts"].unique().sort()
    assert inventory_ts.diff().drop_nulls().unique().to_list() == [timedelta(minutes=5)]
    assert len(inventory_ts) == 72
    t = window[0] + 3 * 3600
    ts = datetime.fromtimestamp(t, tz=UTC).replace(tzinfo=None)
    state = fleet.cluster_state(t)
    pods = history.pod_snapshots.filter(pl.col("ts") == ts)
    assert set(zip(pods["namespace"], pods["pod"], pods["uid"], strict=True)) == {
        (p.namespace, p.name, p.uid) for p in state.pods
    }
    quotas = history.quota_snapshots.filter(pl.col("ts") == ts)
    for q in state.cluster_queues:
        for r in q.resources:
            row = quotas.filter((pl.col("object_name") == q.name) & (pl.col("flavor") == r.flavor)
                                & (pl.col("resource") == r.resource))
            assert row["usage"].to_list() == [r.usage]
            assert row["nominal_quota"].to_list() == [r.nominal_quota]
    for rq in state.resource_quotas:
        for res, hard in rq.hard.items():
            row = quotas.filter((pl.col("object_kind") == "ResourceQuota") & (pl.col("object_namespace") == rq.namespace)
                                & (pl.col("resource") == res))
            assert row.select("object_name", "nominal_quota", "usage").rows() == [(rq.name, hard, rq.used[res])]
    assert quotas.filter(pl.col("object_kind") == "ResourceQuota").height == 4
    pending = history.pending_demand.filter(pl.col("ts") == ts)
    assert pending.height == len(state.pending)
    namespaces = history.namespace_snapshots.filter(pl.col("ts") == ts)
    assert namespaces.filter(pl.col("network_policies") == 0).height >= 2


def test_timestamps_are_whole_microseconds_of_the_sample_times() -> None:
    scenario = default_scenario()
    assert int(to_ts(scenario.epoch_seconds + 0.5)) == int(scenario.epoch_seconds * 1_000_000) + 500_000


def test_an_empty_window_gives_empty_frames_with_the_store_columns() -> None:
    start = default_scenario().epoch_seconds + DAY
    empty = default_fleet().history(start, start, 60)
    for name, frame in empty.frames().items():
        assert dict(frame.schema) == COLUMNS[name]
    assert empty.device_samples.height == 0 and empty.pod_snapshots.height == 0
    assert empty.nodes.height == 10  # dimensions still describe the fleet


def test_a_non_positive_step_is_a_user_error() -> None:
    with pytest.raises(UserError, match="step must be positive"):
        default_fleet().history(0.0, 600.0, 0)
