"""The simulated fleet at single instants: hardware honesty, sharing shares, faults, pods, cluster state."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpulens.core.device_model import AllocationSource, DeviceSource, SharingMode
from gpulens.core.errors import UserError
from gpulens.sim.fleet import SimulatedFleet
from gpulens.sim.scenario import Scenario
from tests.support.sim_fleet import default_fleet, default_scenario

DAY = 86400.0


@pytest.fixture
def scenario() -> Scenario:
    return default_scenario()


@pytest.fixture
def fleet() -> SimulatedFleet:
    return default_fleet()


def at(scenario: Scenario, seconds_after_epoch: float) -> float:
    return scenario.epoch_seconds + seconds_after_epoch


def test_a100_mig_instances_report_no_activity(fleet: SimulatedFleet, scenario: Scenario) -> None:
    snap = fleet.node_snapshot("gpu-a100-mig-0", at(scenario, 40 * DAY + 3600))
    instances = [m for g in snap.gpus for m in g.mig_instances]
    assert instances
    assert all(m.activity_ratio is None for m in instances)
    assert all(g.activity_ratio is None for g in snap.gpus)
    # Memory and physical readings are still there, and the workloads are really busy (power shows it).
    assert all(m.memory_used_bytes is not None for m in instances)
    assert max(g.health.power_watts or 0 for g in snap.gpus) > 150


def test_hopper_mig_instances_and_gpus_report_activity_via_gpm(fleet: SimulatedFleet, scenario: Scenario) -> None:
    snap = fleet.node_snapshot("gpu-h200-mig-0", at(scenario, 40 * DAY + 3600))
    assert all(m.activity_ratio is not None and 0 <= m.activity_ratio <= 1 for g in snap.gpus for m in g.mig_instances)
    for g in snap.gpus:
        weighted = sum(m.gpu_equivalents * (m.activity_ratio or 0) for m in g.mig_instances)
        assert g.activity_ratio == pytest.approx(min(1.0, weighted), abs=1e-3)


def test_compute_instances_of_a_split_gpu_instance_share_its_memory(fleet: SimulatedFleet, scenario: Scenario) -> None:
    snap = fleet.node_snapshot("gpu-h200-mig-0", at(scenario, 5 * DAY))
    gpu = snap.gpus[2]  # layout with 2g.35gb split into two 1-slice compute instances
    split = [m for m in gpu.mig_instances if m.profile == "2g.35gb"]
    assert [m.compute_instance_id for m in split] == [0, 1]
    assert len({m.gpu_instance_id for m in split}) == 1
    assert split[0].memory_used_bytes == split[1].memory_used_bytes
    assert split[0].memory_total_bytes == 33280 * 1024 * 1024
    assert all(m.gpu_equivalents == pytest.approx(1 / 7) for m in split)
    procs = [p for p in snap.processes if p.device_id in {m.uuid for m in split}]
    assert len(procs) == 2
    assert sum(p.used_memory_bytes or 0 for p in procs) < (split[0].memory_used_bytes or 0)


def test_gpu_memory_used_is_the_sum_over_gpu_instances(fleet: SimulatedFleet, scenario: Scenario) -> None:
    snap = fleet.node_snapshot("gpu-h200-mig-0", at(scenario, 5 * DAY))
    for g in snap.gpus:
        per_gi = {m.gpu_instance_id: m.memory_used_bytes or 0 for m in g.mig_instances}
        assert g.memory_used_bytes == sum(per_gi.values())
        assert g.memory_used_bytes <= g.memory_total_bytes


def test_time_sliced_replicas_hold_a_share_of_one_over_replicas(fleet: SimulatedFleet, scenario: Scenario) -> None:
    snap = fleet.node_snapshot("gpu-h100-ts-0", at(scenario, 9 * DAY + 7200))
    gpus = {g.uuid: g for g in snap.gpus}
    assert all(g.sharing_mode is SharingMode.TIME_SLICING and g.replicas == 4 for g in snap.gpus)
    assert snap.allocations
    for a in snap.allocations:
        assert a.device_id in gpus
        assert a.gpu_equivalents == pytest.approx(0.25)
        assert a.replica is not None and 0 <= a.replica < 4
    by_gpu: dict[str, list[int]] = {}
    for a in snap.allocations:
        by_gpu.setdefault(a.device_id, []).append(a.replica or 0)
    assert all(len(r) == len(set(r)) and len(r) <= 4 for r in by_gpu.values())
    # Per-process memory and SM share make per-pod attribution possible on the shared GPU.
    for p in snap.processes:
        assert p.pod_uid and p.used_memory_bytes and p.sm_utilization_ratio is not None
    assert {p.pod_uid for p in snap.processes} == {a.pod_uid for a in snap.allocations}


def test_mps_clients_hold_half_a_gpu_each(fleet: SimulatedFleet, scenario: Scenario) -> None:
    snap = fleet.node_snapshot("gpu-h200-mps-0", at(scenario, 3 * DAY))
    assert {a.sharing_mode for a in snap.allocations} == {SharingMode.MPS}
    assert {a.gpu_equivalents for a in snap.allocations} == {0.5}


def test_exclusive_training_gpus_are_busy_and_hold_most_memory(fleet: SimulatedFleet, scenario: Scenario) -> None:
    snap = fleet.node_snapshot("gpu-h100-train-0", at(scenario, 6 * DAY + 1234))
    assert len(snap.allocations) == 8 and {a.gpu_equivalents for a in snap.allocations} == {1.0}
    assert len({a.pod for a in snap.allocations}) == 1  # one 8-GPU worker pod per node
    busy = [g for g in snap.gpus if (g.activity_ratio or 0) > 0.7]
    assert len(busy) >= 6
    assert all((g.memory_used_bytes or 0) > 0.8 * g.memory_total_bytes for g in snap.gpus)
    assert all(g.health.sm_clock_hz == 1980e6 for g in busy)


def test_inference_holds_memory_at_low_activity_with_a_daily_cycle(fleet: SimulatedFleet, scenario: Scenario) -> None:
    def ranker_devices(t: float) -> list[tuple[float, float]]:
        snap = fleet.node_snapshot("gpu-h200-mig-0", t)
        held = {a.device_id for a in snap.allocations if a.workload_name == "ranker-serving"}
        return [
            (m.activity_ratio or 0.0, (m.memory_used_bytes or 0) / m.memory_total_bytes)
            for g in snap.gpus for m in g.mig_instances if m.uuid in held
        ]

    day = 30 * DAY
    peak = ranker_devices(at(scenario, day + 15 * 3600))
    night = ranker_devices(at(scenario, day + 3 * 3600))
    assert all(mem > 0.75 for _, mem in peak + night)
    assert all(act < 0.45 for act, _ in peak)
    assert sum(a for a, _ in peak) > 3 * sum(a for a, _ in night)


def test_notebooks_are_mostly_idle(fleet: SimulatedFleet, scenario: Scenario) -> None:
    values = []
    for hour in range(0, 7 * 24, 5):
        snap = fleet.node_snapshot("gpu-h200-mig-0", at(scenario, 20 * DAY + hour * 3600))
        held = {a.device_id for a in snap.allocations if a.workload_name == "jupyter"}
        values += [m.activity_ratio or 0 for g in snap.gpus for m in g.mig_instances if m.uuid in held]
    idle = sum(1 for v in values if v < 0.05)
    assert idle / len(values) > 0.8


def test_batch_pods_go_away_at_the_end_of_their_slot(fleet: SimulatedFleet, scenario: Scenario) -> None:
    slot = 1800.0
    names_by_slot = []
    for k in range(40):
        t = (int(at(scenario, 10 * DAY) // slot) + k) * slot
        start = {a.pod for a in fleet.node_snapshot("gpu-h200-mig-0", t).allocations if a.workload_name == "vision-eval"}
        end = {a.pod for a in fleet.node_snapshot("gpu-h200-mig-0", t + slot - 1).allocations
               if a.workload_name == "vision-eval"}
        assert start == end  # the same pods for the whole slot
        names_by_slot.append(start)
    for before, after in zip(names_by_slot, names_by_slot[1:], strict=False):
        assert not before & after  # a new slot never reuses a pod name
    counts = [len(n) for n in names_by_slot]
    assert min(counts) < max(counts) <= 8


def test_xid79_takes_the_gpu_off_the_bus_for_a_while(fleet: SimulatedFleet, scenario: Scenario) -> None:
    def gpu5(t: float):  # type: ignore[no-untyped-def]
        return fleet.node_snapshot("gpu-h100-train-1", at(scenario, t)).gpus[5]

    before, during, after = gpu5(3 * DAY - 60), gpu5(3 * DAY + 600), gpu5(3 * DAY + 45 * 60)
    assert before.up and before.health.xid_counts == {79: 0}
    assert not during.up
    assert during.memory_used_bytes is None and during.activity_ratio is None
    assert during.health.power_watts is None and during.health.temperature_celsius is None
    assert during.health.xid_counts == {79: 1}
    assert during.health.xid_last_seen == {79: at(scenario, 3 * DAY)}
    assert after.up and after.health.power_watts is not None and after.health.xid_counts == {79: 1}
    assert gpu5(12 * DAY + 1).health.xid_counts == {79: 2}  # every 9 days, cumulative
    snap = fleet.node_snapshot("gpu-h100-train-1", at(scenario, 3 * DAY + 600))
    assert during.uuid not in {p.device_id for p in snap.processes}
    assert during.uuid in {a.device_id for a in snap.allocations}  # the kubelet still assigns it
    assert all(g.up for g in snap.gpus if g.index != 5)  # a lost GPU keeps the others reporting


def test_xid48_adds_double_bit_ecc_errors_and_retired_pages(fleet: SimulatedFleet, scenario: Scenario) -> None:
    def health(t: float):  # type: ignore[no-untyped-def]
        return fleet.node_snapshot("gpu-a100-mig-0", at(scenario, t)).gpus[2].health

    first = 2 * DAY + 4 * 3600
    assert health(first - 1).ecc_uncorrected_total == 0 and health(first - 1).xid_counts == {48: 0}
    assert health(first).ecc_uncorrected_total == 2 and health(first).xid_counts == {48: 1}
    assert health(first).retired_pages_total == 2
    assert health(first + 6 * DAY).ecc_uncorrected_total == 4
    assert health(first + 6 * DAY).remapped_rows_failure is None  # not queryable in MIG mode


def test_xid13_is_counted_daily_without_taking_the_gpu_down(fleet: SimulatedFleet, scenario: Scenario) -> None:
    gpu = fleet.node_snapshot("gpu-h200-mig-0", at(scenario, 3 * DAY + 13 * 3600)).gpus[2]
    assert gpu.up and gpu.health.xid_counts == {13: 4}
    assert gpu.health.xid_last_seen[13] == at(scenario, 3 * DAY + 12 * 3600)


def test_thermal_throttling_lowers_clocks_and_counts_violation_time(fleet: SimulatedFleet, scenario: Scenario) -> None:
    start = DAY + 14 * 3600

    def gpu7(t: float):  # type: ignore[no-untyped-def]
        return fleet.node_snapshot("gpu-h100-train-0", at(scenario, t)).gpus[7].health

    before, mid, after = gpu7(start - 60), gpu7(start + 20 * 60), gpu7(start + 3600)
    assert before.throttle_reasons == frozenset() and before.thermal_violation_seconds_total == 0
    assert mid.throttle_reasons == {"hw_thermal", "sw_thermal"}
    assert mid.thermal_violation_seconds_total == pytest.approx(1200)
    assert (mid.sm_clock_hz or 0) < (before.sm_clock_hz or 0)
    assert (mid.temperature_celsius or 0) >= 85
    assert after.throttle_reasons == frozenset() and after.thermal_violation_seconds_total == pytest.approx(2400)
    assert gpu7(start + 2 * DAY + 60).thermal_violation_seconds_total == pytest.approx(2460)


def test_energy_counters_rise_and_physical_readings_are_in_calibrated_ranges(
    fleet: SimulatedFleet, scenario: Scenario
) -> None:
    for node in fleet.node_names():
        a = fleet.node_snapshot(node, at(scenario, 20 * DAY))
        b = fleet.node_snapshot(node, at(scenario, 20 * DAY + 600))
        for ga, gb in zip(a.gpus, b.gpus, strict=True):
            if not (ga.up and gb.up):
                continue
            assert (gb.health.energy_joules or 0) > (ga.health.energy_joules or 0)
            assert 50 <= (ga.health.power_watts or 0) <= 700
            assert 20 <= (ga.health.temperature_celsius or 0) <= 95


def test_identities_are_real_uuid_formats(fleet: SimulatedFleet, scenario: Scenario) -> None:
    snap = fleet.node_snapshot("gpu-h200-mig-0", at(scenario, 0))
    pattern = r"^{}-[0-9a-f]{{8}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{4}}-[0-9a-f]{{12}}$"
    import re

    assert all(re.match(pattern.format("GPU"), g.uuid) for g in snap.gpus)
    assert all(re.match(pattern.format("MIG"), m.uuid) for g in snap.gpus for m in g.mig_instances)


def test_unknown_node_is_a_user_error(fleet: SimulatedFleet) -> None:
    with pytest.raises(UserError, match="unknown node 'gpu-nope-0'.*gpu-h200-mig-0"):
        fleet.node_snapshot("gpu-nope-0", 0.0)
    with pytest.raises(UserError):
        fleet.source("gpu-nope-0")


def test_a_source_reads_devices_and_allocations_and_counts_reads(fleet: SimulatedFleet, scenario: Scenario) -> None:
    source = fleet.source("gpu-h200-mig-0")
    device_source: DeviceSource = source
    allocation_source: AllocationSource = source
    now = at(scenario, 8 * DAY)
    readings = device_source.read_devices(now)
    allocations = allocation_source.read_allocations(now)
    assert source.reads == 1
    snap = fleet.node_snapshot("gpu-h200-mig-0", now)
    # The source is what an exporter sees: XID counts since its first read (see test_exporter_invariants).
    assert [replace(g, health=replace(g.health, xid_counts={}, xid_last_seen={})) for g in readings.gpus] == [
        replace(g, health=replace(g.health, xid_counts={}, xid_last_seen={})) for g in snap.gpus]
    assert readings.processes == snap.processes
    assert allocations == snap.allocations
    # A cycle reads devices and allocations for the same instant: the node is evaluated once.
    again = device_source.read_devices(now)
    assert again.gpus is readings.gpus and source.reads == 2
    assert device_source.read_devices(now + 5).gpus is not readings.gpus
    source.close()


def test_snapshots_are_pure_functions_of_time(fleet: SimulatedFleet, scenario: Scenario) -> None:
    t1, t2 = at(scenario, 11 * DAY), at(scenario, 2 * DAY)
    first = fleet.node_snapshot("gpu-h100-ts-0", t1)
    fleet.node_snapshot("gpu-h100-ts-0", t2)
    again = SimulatedFleet(scenario).node_snapshot("gpu-h100-ts-0", t1)
    assert first.gpus == again.gpus and first.allocations == again.allocations


def test_cluster_state_has_queues_quotas_and_pending_demand(fleet: SimulatedFleet, scenario: Scenario) -> None:
    state = fleet.cluster_state(at(scenario, 10 * DAY))
    assert {t.name for t in state.tenants} == {
        "llm-research", "search-ranking", "vision", "recsys", "ml-notebooks", "foundation"}
    llm = next(q for q in state.cluster_queues if q.name == "llm-research")
    h100 = next(r for r in llm.resources if r.flavor == "h100-80gb")
    assert h100.usage == h100.nominal_quota == 16 and h100.borrowing_limit == 0  # exhausted
    assert not any(p.tenant == "llm-research" for p in state.pending)  # full, nothing waits: the plan may cut it
    vision = [p for p in state.pending if p.tenant == "vision"]
    assert vision and vision[0].resource == "nvidia.com/mig-3g.71gb" and vision[0].gpu_model == "NVIDIA H200"
    assert any(ns.network_policies == 0 for ns in state.namespaces)
    assert any(ns.virtual_cluster == "vision-vc" for ns in state.namespaces)
    assert next(t for t in state.tenants if t.name == "llm-research").dedicated_pool == "gpu-h100-train"
    lq = {q.name: q for q in state.local_queues}
    assert lq["notebooks-queue"].cluster_queue == "ml-notebooks"
    pods = [p for p in state.pods if p.workload_name == "llama-pretrain"]
    assert len(pods) == 2 and pods[0].workload_kind == "JobSet" and dict(pods[0].gpu_requests) == {"nvidia.com/gpu": 8.0}
    assert pods[0].labels["kueue.x-k8s.io/queue-name"] == pods[0].queue == "llm-research-queue"
    rq = {(q.namespace, r): (q.hard[r], q.used[r]) for q in state.resource_quotas for r in q.hard}
    assert rq[("notebooks", "requests.nvidia.com/mig-1g.18gb")] == (12, 12)
    assert rq[("notebooks", "requests.nvidia.com/gpu")] == (16, 12)  # the time-sliced notebooks
    assert all(q.name == "gpu-quota" for q in state.resource_quotas)
    bypass = [p for p in state.pods if p.workload_name == "query-rewrite"]
    assert bypass and all(p.queue is None for p in bypass)


def test_cluster_state_pods_match_the_allocations_at_the_same_time(fleet: SimulatedFleet, scenario: Scenario) -> None:
    t = at(scenario, 17 * DAY + 4321)
    state = fleet.cluster_state(t)
    for node in fleet.node_names():
        snap = fleet.node_snapshot(node, t)
        assert {(a.namespace, a.pod, a.pod_uid) for a in snap.allocations} == {
            (p.namespace, p.name, p.uid) for p in state.pods if p.node == node
        }
    notebooks_1g = next(
        r for q in state.cluster_queues if q.name == "ml-notebooks" for r in q.resources
        if r.resource == "nvidia.com/mig-1g.18gb"
    )
    assert notebooks_1g.usage == notebooks_1g.nominal_quota == 12  # exhausted, with pending demand


def test_free_mig_slices_on_the_default_node_cannot_serve_the_pending_shapes(
    fleet: SimulatedFleet, scenario: Scenario
) -> None:
    t = at(scenario, 12 * DAY + 7 * 3600)
    snap = fleet.node_snapshot("gpu-h200-mig-0", t)
    held = {a.device_id for a in snap.allocations}
    plan = fleet.node_plan("gpu-h200-mig-0")
    free = [d for d in plan.devices if d.uuid not in held]
    assert sum(d.compute_share for d in free) >= 3 / 7  # enough slices in total for a 3g.71gb...
    pending = {p.profile for p in fleet.cluster_state(t).pending if p.flavor == "h200-mig" and p.tenant == "vision"}
    assert pending == {"3g.71gb"}
    assert not [d for d in free if d.shape in pending]  # ...but no free device has that shape: stranded
