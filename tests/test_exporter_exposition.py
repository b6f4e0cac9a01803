"""The exporter's Prometheus exposition: what a scrape returns for a known node snapshot."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from exporter.cycle import ExporterState
from exporter.exposition import WARM_MEMORY, ExpositionCache, SnapshotCollector
from exporter.exposition import render_text as render_fast
from tests.support.exporter import fake_cycle, render_text
from tests.support.fakes import every_family_allocations, every_family_readings

GOLDEN = Path(__file__).parent / "fixtures" / "exporter_every_family.prom"


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, dict(s.labels), s.value)
            for fam in text_string_to_metric_families(text) for s in fam.samples]


def every_family_state() -> ExporterState:
    cycle, _, _ = fake_cycle(every_family_readings(), every_family_allocations())
    return cycle.run_once()


def test_exposition_of_a_known_snapshot_matches_the_golden_file() -> None:
    text = render_text(every_family_state())
    if os.environ.get("GPULENS_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")


def test_mig_instances_carry_profile_and_gpu_instance_labels() -> None:
    got = samples(render_text(every_family_state()))
    mig = [lab for name, lab, _ in got if name == "gpulens_device_gpu_equivalents" and lab["profile"] == "2g.35gb"]
    assert {(m["gpu_instance"], m["compute_instance"]) for m in mig} == {("5", "0"), ("5", "1")}


def test_memory_is_reported_once_per_gpu_instance_not_per_compute_instance() -> None:
    got = samples(render_text(every_family_state()))
    mem = [lab for name, lab, _ in got
           if name == "gpulens_device_memory_total_bytes" and lab["gpu"].startswith("GPU-1111")]
    assert sorted(m["gpu_instance"] for m in mem) == ["2", "5", "9"]
    assert next(m for m in mem if m["gpu_instance"] == "5")["device"].endswith("000000000002")


def test_activity_the_hardware_cannot_give_is_absent_not_zero() -> None:
    got = samples(render_text(every_family_state()))
    a100 = [lab for name, lab, _ in got if name == "gpulens_device_activity_ratio" and lab["gpu"].startswith("GPU-2222")]
    assert a100 == []
    unmeasured = {(lab["tenant"], lab["profile"]): v for name, lab, v in got
                  if name == "gpulens_tenant_unmeasured_gpu_equivalents"}
    assert unmeasured[("team-a", "4g.40gb")] == 4 / 7
    active_keys = {(lab["tenant"], lab["profile"]) for name, lab, _ in got
                   if name == "gpulens_tenant_active_gpu_equivalents"}
    assert ("team-a", "4g.40gb") not in active_keys


def test_a_lost_gpu_keeps_its_identity_and_xid_but_no_readings() -> None:
    got = samples(render_text(every_family_state()))
    lost = "GPU-55555555-5555-5555-5555-555555555555"
    names = {name for name, lab, _ in got if lab.get("gpu") == lost}
    assert names == {"gpulens_gpu_info", "gpulens_gpu_up", "gpulens_gpu_xid_errors_total",
                     "gpulens_gpu_xid_last_seen_timestamp_seconds", "gpulens_device_gpu_equivalents"}
    assert ("gpulens_gpu_up", {"node": "node-a", "gpu": lost}, 0.0) in got


def test_tenant_totals_sum_the_allocations() -> None:
    got = samples(render_text(every_family_state()))
    per_tenant: dict[str, float] = {}
    for name, lab, value in got:
        if name == "gpulens_allocation_gpu_equivalents":
            per_tenant[lab["tenant"]] = per_tenant.get(lab["tenant"], 0.0) + value
    totals: dict[str, float] = {}
    for name, lab, value in got:
        if name == "gpulens_tenant_allocated_gpu_equivalents":
            totals[lab["tenant"]] = totals.get(lab["tenant"], 0.0) + value
    assert totals.keys() == per_tenant.keys() == {"team-a", "team-b", "team-c"}
    for tenant, total in totals.items():
        assert abs(total - per_tenant[tenant]) < 1e-9
    assert abs(totals["team-c"] - 1.5) < 1e-9


def test_per_process_attribution_splits_a_time_sliced_gpu_by_pod() -> None:
    got = samples(render_text(every_family_state()))
    active = {(lab["tenant"], lab["profile"]): v for name, lab, v in got
              if name == "gpulens_tenant_active_gpu_equivalents"}
    # team-a's pod runs 45 % of the SMs but holds one replica of four: active is capped at its 0.25 share
    # (active is a part of allocated); team-c: one pod measured at 15 %, one without processes (0.25 x 0.6)
    # plus its exclusive H100 at 90 %.
    assert abs(active[("team-a", "gpu")] - 0.25) < 1e-9
    assert abs(active[("team-c", "gpu")] - (0.15 + 0.25 * 0.6 + 0.9)) < 1e-9


def test_hostile_pod_names_are_escaped_in_the_exposition() -> None:
    text = render_text(every_family_state())
    assert 'pod="nb-\\"x\\"\\n</script>"' in text
    pods = {lab["pod"] for name, lab, _ in samples(text) if name == "gpulens_allocation_gpu_equivalents"}
    assert 'nb-"x"\n</script>' in pods


def test_series_of_a_pod_that_went_away_disappear_at_the_next_cycle() -> None:
    cycle, _, allocs = fake_cycle(every_family_readings(), every_family_allocations())
    before = render_text(cycle.run_once())
    assert 'pod="train-big-0"' in before and 'tenant="team-c"' in before
    allocs.allocations = tuple(a for a in every_family_allocations() if a.tenant != "team-c")
    after = render_text(cycle.run_once())
    assert 'pod="train-big-0"' not in after
    assert 'tenant="team-c"' not in after


def test_duplicate_replicas_of_one_container_are_summed_into_one_series() -> None:
    base = every_family_allocations()[5]
    cycle, _, _ = fake_cycle(every_family_readings(), (base, replace(base, replica=3)))
    got = samples(render_text(cycle.run_once()))
    series = [v for name, _, v in got if name == "gpulens_allocation_gpu_equivalents"]
    assert series == [0.5]


def test_before_the_first_cycle_only_exporter_health_is_served() -> None:
    text = render_text(ExporterState(node="node-a", errors_total={"devices": 0}))
    names = {name for name, _, _ in samples(text)}
    assert names == {"gpulens_exporter_build_info", "gpulens_exporter_cycles_total",
                     "gpulens_exporter_errors_total"}


def test_openmetrics_rendering_parses_and_carries_the_same_series() -> None:
    state = every_family_state()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: state, backend="sim", version="0.1.0"))
    cache = ExpositionCache(registry, lambda: state)
    om = cache.render(openmetrics=True).body.decode()
    assert om.endswith("# EOF\n")
    om_names = {s.name for fam in parse_openmetrics(om) for s in fam.samples}
    text_names = {name for name, _, _ in samples(render_text(state))}
    assert om_names == text_names


def test_the_render_cache_renders_once_per_state_and_again_after_a_cycle() -> None:
    cycle, _, _ = fake_cycle(every_family_readings(), every_family_allocations())
    cycle.run_once()
    calls = []

    class CountingCollector:
        def collect(self):  # type: ignore[no-untyped-def]
            calls.append(1)
            return iter(())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(cycle.state, backend="sim", version="0.1.0"))
    registry.register(CountingCollector())
    cache = ExpositionCache(registry, cycle.state)
    first = cache.render()
    assert cache.render() is first and cache.render().body is first.body
    assert len(calls) == 1
    gz = cache.render(gzipped=True)
    assert gz.gzipped and len(calls) == 1
    cycle.run_once()
    assert cache.render() is not first
    assert len(calls) == 2


def test_the_fast_renderers_are_byte_identical_to_prometheus_client() -> None:
    state = every_family_state()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: state, backend="sim", version="0.1.0"))
    assert render_fast(registry.collect()) == generate_latest(registry)
    assert render_fast(registry.collect(), openmetrics=True) == generate_openmetrics(registry)


def test_families_the_fast_path_does_not_handle_are_rendered_by_prometheus_client() -> None:
    registry = CollectorRegistry(auto_describe=False)
    histogram = Histogram("lat_seconds", "Latency.", ["path"], registry=registry, buckets=(0.1, 1.0))
    histogram.labels(path="/metrics").observe(0.05)
    info = InfoMetricFamily("build", "Build.", value={"version": "1"})
    registry.register(type("InfoCollector", (), {"collect": lambda self: [info]})())
    assert render_fast(registry.collect()) == generate_latest(registry)
    assert render_fast(registry.collect(), openmetrics=True) == generate_openmetrics(registry)


def test_warming_pre_renders_the_formats_scrapers_ask_for_and_forgets_unused_ones() -> None:
    cycle, _, _ = fake_cycle(every_family_readings(), every_family_allocations())
    cycle.run_once()
    renders: list[int] = []
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(cycle.state, backend="sim", version="0.1.0"))
    class Spy:
        def collect(self) -> list[Metric]:
            renders.append(1)
            return []

    registry.register(Spy())
    cache = ExpositionCache(registry, cycle.state)
    cache.render(openmetrics=True, gzipped=True)  # what Prometheus asks for
    cycle.run_once()
    cache.warm()
    before = len(renders)
    assert cache.render(openmetrics=True, gzipped=True).body.startswith(b"\x1f\x8b")
    assert len(renders) == before  # served from the pre-rendered bytes
    for _ in range(WARM_MEMORY + 1):  # nobody scrapes for a long while
        cycle.run_once()
        cache.warm()
    before = len(renders)
    cache.render(gzipped=True)  # after that, only the default text format is pre-rendered
    assert len(renders) == before
    cache.render(openmetrics=True, gzipped=True)
    assert len(renders) == before + 1


@settings(max_examples=60, deadline=None)
@given(value=st.text(), help_text=st.text(min_size=1))
def test_any_label_value_renders_like_prometheus_client(value: str, help_text: str) -> None:
    family = GaugeMetricFamily("gpulens_x", help_text, labels=["pod", "a"])
    family.add_metric([value, "v"], 1.5)
    counter = CounterMetricFamily("gpulens_y", "Y.", labels=["pod"])
    counter.add_metric([value], 3.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(type("C", (), {"collect": lambda self: [family, counter]})())
    assert render_fast(registry.collect()) == generate_latest(registry)
    assert render_fast(registry.collect(), openmetrics=True) == generate_openmetrics(registry)
    parsed = {s.name: s.labels["pod"] for f in text_string_to_metric_families(render_fast([family, counter]).decode())
              for s in f.samples}
    assert parsed == {"gpulens_x": value, "gpulens_y_total": value}
