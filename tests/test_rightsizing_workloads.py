"""Workload rightsizing from a hand-built store: the smallest MIG profile that fits, with reasons."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analytics.facts import bind_facts
from analytics.rightsizing import (
    MigFitSettings,
    MigFitStrategy,
    WorkloadRecommendation,
    WorkloadUsage,
    load_workload_usage,
)
from analytics.rightsizing.evidence import sample_step_seconds
from gpulens.core.mig_catalog import model_by_name
from tests.support.recommend_store import T0, StoreBuilder, gib

WEEK = 7 * 288  # samples at a 5-minute step


def serving_activity(i: int) -> float:
    """Real serving: idle most of the time, short request bursts (3% at 0.4, 7% at 0.08)."""
    if i % 100 < 3:
        return 0.4
    if i % 100 < 10:
        return 0.08
    return 0.0


def rightsize(path: Path, settings: MigFitSettings | None = None) -> dict[str, WorkloadRecommendation]:
    with duckdb.connect(str(path)) as con:
        bind_facts(con, None)  # the loaders read the f_* fact views
        end = con.execute("SELECT max(ts) FROM device_samples").fetchone()[0]
        start = end - timedelta(days=14)
        usages = load_workload_usage(con, start, end)
        step = sample_step_seconds(con, start, end)
    strategy = MigFitStrategy(settings or MigFitSettings())
    return {u.name: strategy.run(u, step) for u in usages}


@pytest.fixture
def store(tmp_path: Path) -> StoreBuilder:
    return StoreBuilder(tmp_path / "store.duckdb")


def test_an_idle_serving_workload_keeps_its_memory_and_shrinks_compute(store: StoreBuilder) -> None:
    store.device("g0", "H200")
    store.workload("team-a", "Deployment", "llm-serve", {"llm-serve-0": ["g0"]}, samples=WEEK,
                   activity=serving_activity, memory=lambda i: gib(26) + (i % 7) * gib(0.04))
    rec = rightsize(store.save())["llm-serve"]

    profile = model_by_name("H200").profile(rec.recommended_profile or "")
    assert rec.recommended_profile == "1g.35gb"
    assert rec.action == "shrink"
    assert_reasons_agree_with_action(rec)
    assert profile.memory_bytes >= rec.usage.memory_peak_bytes * 1.15
    assert profile.compute_slices == 1
    assert rec.usage.compute_p95_ge == pytest.approx(0.08, abs=0.01)
    assert any("memory P99" in r for r in rec.reasons)
    assert rec.converts_to_mig


def test_a_busy_workload_keeps_its_whole_gpu(store: StoreBuilder) -> None:
    store.device("g0", "H100")
    store.workload("team-a", "StatefulSet", "trainer", {"trainer-0": ["g0"]}, samples=WEEK,
                   activity=lambda i: 0.85, memory=lambda i: gib(30))
    rec = rightsize(store.save())["trainer"]
    assert (rec.recommended_profile, rec.recommended_devices_per_pod, rec.action) == ("gpu", 1, "keep")
    assert not rec.converts_to_mig


def test_memory_no_mig_profile_holds_keeps_a_whole_gpu_even_when_idle(store: StoreBuilder) -> None:
    store.device("g0", "H100")
    store.workload("team-a", "Deployment", "big-cache", {"big-cache-0": ["g0"]}, samples=WEEK,
                   activity=lambda i: 0.0, memory=lambda i: gib(60))
    rec = rightsize(store.save())["big-cache"]
    assert rec.recommended_profile == "gpu"
    assert any("no MIG profile" in r for r in rec.reasons)


def test_compute_need_picks_a_profile_with_enough_slices_not_only_memory(store: StoreBuilder) -> None:
    store.device("g0", "H100")
    store.workload("team-b", "Job", "etl", {"etl-0": ["g0"]}, samples=WEEK,
                   activity=lambda i: 0.35, memory=lambda i: gib(5))
    rec = rightsize(store.save())["etl"]
    assert rec.recommended_profile == "3g.40gb"  # 0.35 * 1.15 = 0.40 GE > 2/7, <= 3/7


def test_a100_mig_without_activity_sizes_by_memory_and_says_so(store: StoreBuilder) -> None:
    store.device("m0", "A100", "3g.40gb")
    store.device("m1", "A100", "3g.40gb", node="node-2")
    store.workload("team-c", "Deployment", "embedder", {"embedder-0": ["m0"]}, samples=WEEK,
                   activity=lambda i: None, memory=lambda i: gib(8))
    store.workload("team-c", "Deployment", "twin", {"twin-0": ["m1"]}, samples=WEEK,
                   activity=lambda i: 0.05, memory=lambda i: gib(8))
    recs = rightsize(store.save())
    rec, measured = recs["embedder"], recs["twin"]
    assert rec.recommended_profile == "1g.10gb"
    assert rec.compute_need_ge is None
    assert any("compute activity is not measured on A100 MIG" in r for r in rec.reasons)
    assert rec.confidence.value == pytest.approx(measured.confidence.value / 2)


def test_a_multi_gpu_job_that_uses_little_is_offered_fewer_gpus(store: StoreBuilder) -> None:
    for g in range(8):
        store.device(f"g{g}", "H100")
    store.workload("team-d", "JobSet", "light", {"light-0": ["g0", "g1", "g2", "g3"]}, samples=WEEK,
                   activity=lambda i: 0.2, memory=lambda i: gib(10))
    store.workload("team-d", "RayCluster", "medium", {"medium-head": ["g4", "g5", "g6", "g7"]}, samples=WEEK,
                   activity=lambda i: 0.6, memory=lambda i: gib(20))
    recs = rightsize(store.save())
    assert (recs["light"].recommended_profile, recs["light"].recommended_devices_per_pod) == ("gpu", 1)
    assert recs["light"].action == "shrink"
    assert (recs["medium"].recommended_profile, recs["medium"].recommended_devices_per_pod) == ("gpu", 3)
    assert recs["medium"].action == "shrink"


def test_too_little_history_gives_no_recommendation(store: StoreBuilder) -> None:
    store.device("g0", "H100")
    store.workload("team-a", "Deployment", "new", {"new-0": ["g0"]}, samples=50,
                   activity=lambda i: 0.0, memory=lambda i: gib(1))
    rec = rightsize(store.save())["new"]
    assert rec.action == "insufficient_data"
    assert rec.recommended_profile is None
    assert any("not enough data" in r for r in rec.reasons)


def test_confidence_counts_days_of_data_vpa_style(store: StoreBuilder) -> None:
    store.device("g0", "H100")
    store.device("g1", "H100")
    store.workload("team-a", "Deployment", "week", {"week-0": ["g0"]}, samples=WEEK,
                   activity=lambda i: 0.1, memory=lambda i: gib(4))
    store.workload("team-a", "Deployment", "day", {"day-0": ["g1"]}, samples=288,
                   activity=lambda i: 0.1, memory=lambda i: gib(4))
    recs = rightsize(store.save())
    assert recs["week"].confidence.value == pytest.approx(7, abs=0.01)
    assert recs["week"].confidence.label == "high"
    assert recs["day"].confidence.value == pytest.approx(1, abs=0.01)
    assert recs["day"].confidence.is_low


def test_a_bare_pod_is_its_own_workload(store: StoreBuilder) -> None:
    store.device("g0", "H200")
    store.workload("team-e", None, None, {"notebook-x": ["g0"]}, samples=WEEK,
                   activity=lambda i: 0.0, memory=lambda i: gib(3))
    rec = rightsize(store.save())["notebook-x"]
    assert rec.usage.kind == "Pod"
    assert rec.recommended_profile == "1g.18gb"


def test_replicas_are_counted_and_mig_can_be_switched_off(store: StoreBuilder) -> None:
    for g in range(3):
        store.device(f"g{g}", "H200")
    store.workload("team-a", "Deployment", "api", {f"api-{g}": [f"g{g}"] for g in range(3)}, samples=WEEK,
                   activity=serving_activity, memory=lambda i: gib(10))
    path = store.save()
    rec = rightsize(path)["api"]
    assert rec.usage.max_replicas == 3
    assert rec.recommended_profile == "1g.18gb"
    whole_only = rightsize(path, MigFitSettings(allow_mig=False))["api"]
    assert (whole_only.recommended_profile, whole_only.action) == ("gpu", "keep")


def test_a_workload_that_fits_its_shape_is_not_grown_on_headroom_alone(store: StoreBuilder) -> None:
    store.device("m0", "H200", "1g.18gb")
    store.device("m1", "H200", "1g.18gb", node="node-2")
    store.workload("team-a", "Deployment", "tight", {"tight-0": ["m0"]}, samples=WEEK,
                   activity=lambda i: 0.5, memory=lambda i: gib(14.5))  # 0.5 of 1/7 GE, 14.5 of 16 GiB
    store.workload("team-a", "Deployment", "over", {"over-0": ["m1"]}, samples=WEEK,
                   activity=lambda i: 1.0, memory=lambda i: gib(15.9))
    recs = rightsize(store.save())
    assert (recs["tight"].recommended_profile, recs["tight"].action) == ("1g.18gb", "keep")
    assert any("not growing on headroom alone" in r for r in recs["tight"].reasons)
    assert_reasons_agree_with_action(recs["tight"])
    assert_reasons_agree_with_action(recs["over"])
    assert recs["over"].action == "grow"  # saturated compute: P95 = its whole slice
    assert recs["over"].recommended_profile == "2g.35gb"


@given(
    model=st.sampled_from(["H100", "H200", "A100"]),
    current=st.sampled_from(["gpu", "mig"]),
    compute=st.one_of(st.none(), st.floats(0, 1)),
    memory_gib=st.floats(0.1, 79),
    peak_extra_gib=st.floats(0, 5),
)
def test_a_recommended_shape_always_covers_the_observed_peak_and_p95_and_its_reasons_name_it(
    model: str, current: str, compute: float | None, memory_gib: float, peak_extra_gib: float
) -> None:
    gpu = model_by_name(model)
    profile = "gpu" if current == "gpu" else gpu.mig_profiles[-2].name
    peak = min(gib(memory_gib + peak_extra_gib), gpu.memory_bytes)
    usage = WorkloadUsage(
        namespace="ns", kind="Deployment", name="w", tenant="t", gpu_model=model, current_profile=profile,
        devices_per_pod=1, max_replicas=1, samples=2016, compute_samples=0 if compute is None else 2016,
        compute_p95_ge=compute, memory_p99_bytes=min(gib(memory_gib), peak), memory_peak_bytes=peak,
        device_memory_peak_bytes=peak, first_seen=T0, last_seen=T0 + timedelta(days=7),
    )
    rec = MigFitStrategy(MigFitSettings()).run(usage, 300)
    assert rec.recommended_profile is not None and rec.recommended_devices_per_pod is not None
    assert_reasons_agree_with_action(rec)
    if rec.recommended_profile == "gpu":
        capacity_ge, capacity_mem = float(rec.recommended_devices_per_pod), gpu.memory_bytes * rec.recommended_devices_per_pod
    else:
        p = gpu.profile(rec.recommended_profile)
        capacity_ge, capacity_mem = p.gpu_equivalents, p.memory_bytes
    assert capacity_mem >= peak
    if compute is not None:
        assert capacity_ge >= compute - 1e-9


def test_a_saturated_whole_gpu_workload_is_not_given_more_gpus_per_pod(store: StoreBuilder) -> None:
    store.device("g0", "H100")
    store.workload("team-a", "Deployment", "hot", {"hot-0": ["g0"]}, samples=WEEK,
                   activity=lambda i: 1.0, memory=lambda i: gib(70))
    rec = rightsize(store.save())["hot"]
    assert (rec.recommended_profile, rec.recommended_devices_per_pod, rec.action) == ("gpu", 1, "keep")
    assert any("saturated at 1 GPU(s)" in r for r in rec.reasons)
    assert_reasons_agree_with_action(rec)
    assert not any(r.startswith("needs") for r in rec.reasons)  # it was "needs 2 whole GPU(s) per pod", then kept


def assert_reasons_agree_with_action(rec: WorkloadRecommendation) -> None:
    """The verdict (last reason) names the action and the shape the recommendation ends with; no earlier reason
    states another shape as what fits (a shape the need alone would take is said in the conditional)."""
    shape = f"{rec.recommended_profile} x{rec.recommended_devices_per_pod}"
    verdict = rec.reasons[-1]
    if rec.action == "keep":
        assert verdict.endswith(f"{shape} kept"), verdict
    else:
        assert verdict.startswith(shape) and verdict.endswith(f": {rec.action} to {shape}"), verdict
    for reason in rec.reasons[:-1]:
        assert "smallest" not in reason and "whole GPUs per pod" not in reason, reason
    if rec.action == "keep" and "would take" in verdict:
        assert verdict.index("would take") < verdict.index(f"{shape} kept")
