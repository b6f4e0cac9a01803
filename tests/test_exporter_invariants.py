"""What the exporter states must hold on every simulated node: active is a part of allocated, the
simulator honours ``--attribute-processes``, counters "since start" start at 0."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from exporter.cycle import CollectionCycle
from exporter.exposition import (
    DeviceIdentity,
    allocation_activity,
    device_identities,
    holder_gpu_equivalents,
    pod_sm_shares,
)
from exporter.server import serve_in_thread
from exporter.settings import ExporterSettings
from gpulens.core.device_model import Allocation, GpuProcess, SharingMode
from tests.support.exporter import http_get, render_text
from tests.support.fakes import FakeClock
from tests.support.sim_fleet import default_fleet, default_scenario

DAY = 86400.0
TIMES = (0.5 * DAY + 3600, 3 * DAY + 15 * 3600, 9 * DAY + 10 * 3600 + 17, 20 * DAY + 2 * 3600)
EPS = 1e-9


def _families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in text_string_to_metric_families(text)}


@pytest.mark.parametrize("attribute", [True, False], ids=["attribution-on", "attribution-off"])
def test_active_never_exceeds_allocated_per_tenant_and_device_on_every_simulated_node(attribute: bool) -> None:
    fleet, scenario = default_fleet(), default_scenario()
    modes: set[SharingMode] = set()
    for node in fleet.node_names():
        source = fleet.source(node, attribute_processes=attribute)
        for offset in TIMES:
            now = scenario.epoch_seconds + offset
            state = CollectionCycle(source, source, node=node, clock=lambda now=now: now).run_once()
            snap = state.snapshot
            assert snap is not None
            modes |= {a.sharing_mode for a in snap.allocations}
            devices = device_identities(snap.gpus)
            shares, held = pod_sm_shares(snap.processes), holder_gpu_equivalents(snap.allocations)
            per_device: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
            for a in snap.allocations:
                act = allocation_activity(a, devices.get(a.device_id), shares, held)
                per_device[(a.tenant, a.device_id)][0] += a.gpu_equivalents
                per_device[(a.tenant, a.device_id)][1] += act or 0.0
            for key, (allocated, active) in per_device.items():
                assert active <= allocated + EPS, (node, offset, key, active, allocated)
            families = _families(render_text(state))
            allocated_series = {(lb["tenant"], lb["profile"]): v
                                for lb, v in families["gpulens_tenant_allocated_gpu_equivalents"]}
            for labels, value in families["gpulens_tenant_active_gpu_equivalents"]:
                assert value <= allocated_series[(labels["tenant"], labels["profile"])] + EPS, (node, offset, labels)
    assert {SharingMode.TIME_SLICING, SharingMode.MPS, SharingMode.MIG, SharingMode.EXCLUSIVE} <= modes


def test_with_attribution_off_the_simulator_gives_no_pod_uids_and_active_is_share_times_activity() -> None:
    fleet, scenario = default_fleet(), default_scenario()
    node = "gpu-h100-ts-0"
    now = scenario.epoch_seconds + 3 * DAY + 15 * 3600
    off = fleet.source(node, attribute_processes=False).read_devices(now)
    on = fleet.source(node, attribute_processes=True).read_devices(now)
    assert off.processes and all(p.pod_uid is None for p in off.processes)
    assert all(p.pod_uid for p in on.processes)
    source = fleet.source(node, attribute_processes=False)
    snap = CollectionCycle(source, source, node=node, clock=lambda: now).run_once().snapshot
    assert snap is not None
    devices = device_identities(snap.gpus)
    for a in snap.allocations:
        d = devices[a.device_id]
        expected = None if d.activity_ratio is None else a.gpu_equivalents * d.activity_ratio
        assert allocation_activity(a, d, pod_sm_shares(snap.processes)) == expected


def test_the_exporter_flag_reaches_the_simulator() -> None:
    scenario = default_scenario()
    now = scenario.epoch_seconds + 3 * DAY + 15 * 3600
    for attribute in (False, True):
        with serve_in_thread(ExporterSettings(listen="127.0.0.1:0", node="gpu-h100-ts-0",
                                              attribute_processes=attribute),
                             clock=lambda: now, background_cycle=False) as handle:
            processes = handle.cycle.last_snapshot().processes  # type: ignore[union-attr]
            assert processes and all((p.pod_uid is not None) is attribute for p in processes)


def test_xid_counters_start_at_zero_when_the_exporter_starts_and_count_what_it_sees() -> None:
    scenario = default_scenario()
    clock = FakeClock(scenario.epoch_seconds + 20 * DAY)  # long after several XID 13 events on gpu-h200-mig-0
    with serve_in_thread(ExporterSettings(listen="127.0.0.1:0", node="gpu-h200-mig-0"), clock=clock,
                         background_cycle=False) as handle:
        def xids() -> dict[str, float]:
            families = _families(http_get(handle.url + "/metrics")[2].decode())
            return {lb["xid"]: v for lb, v in families["gpulens_gpu_xid_errors"]}

        assert xids() == {"13": 0.0}
        families = _families(http_get(handle.url + "/metrics")[2].decode())
        assert "gpulens_gpu_xid_last_seen_timestamp_seconds" not in families or not families[
            "gpulens_gpu_xid_last_seen_timestamp_seconds"]  # nothing seen since start
        clock.advance(DAY)  # XID 13 recurs daily on that GPU (see test_sim_fleet)
        handle.cycle.run_once()
        assert xids() == {"13": 1.0}


def _device(ge: float, activity: float | None) -> DeviceIdentity:
    return DeviceIdentity("GPU-1", "GPU-1", "NVIDIA H100", "gpu", "", "", "time-slicing", activity, ge)


@given(
    replicas=st.integers(1, 8),
    held=st.integers(1, 4),
    sm=st.one_of(st.floats(-1, 5), st.just(math.nan), st.just(math.inf)),
    activity=st.one_of(st.none(), st.floats(-1, 3), st.just(math.nan)),
)
def test_active_is_a_part_of_allocated_for_any_reading(replicas: int, held: int, sm: float,
                                                      activity: float | None) -> None:
    """Whatever the per-process or device reading (above 1, negative, NaN), active stays in [0, allocated]."""
    held = min(held, replicas)
    allocations = [Allocation("GPU-1", "ns", "pod", "c", "team", SharingMode.TIME_SLICING, 1 / replicas,
                              replica=r, pod_uid="uid-1") for r in range(held)]
    shares = pod_sm_shares([GpuProcess(1, "GPU-1", 1, sm, pod_uid="uid-1")])
    holders = holder_gpu_equivalents(allocations)
    total = 0.0
    for a in allocations:
        act = allocation_activity(a, _device(1.0, activity), shares, holders)
        if act is not None:
            assert -EPS <= act <= a.gpu_equivalents + EPS
            total += act
    assert total <= held / replicas + EPS
