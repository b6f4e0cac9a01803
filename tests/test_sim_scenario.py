"""Scenario files: the built-in default, MIG layout validity, and clear one-line errors for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.core.device_model import SharingMode
from gpulens.core.errors import UserError
from gpulens.core.mig_catalog import MODELS, layout_problems
from gpulens.sim.fleet import SimulatedFleet
from gpulens.sim.scenario import SCENARIOS_DIR
from gpulens.sim.scenario_file import load_scenario

MINIMAL = """
name: tiny
pools:
  - name: gpu-{model_lower}-mig
    gpu_model: {model}
    sharing: mig
    gpus_per_node: 2
    mig_layouts:
      - {layout}
tenants:
  - name: team-a
    namespaces: [{{name: team-a}}]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    with pytest.raises(UserError) as info:
        load_scenario(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    return message


def test_the_default_scenario_is_documented_and_loads() -> None:
    scenario = load_scenario(None)
    assert scenario.name == "default"
    assert len(scenario.pools) >= 4
    assert 4 <= len(scenario.tenants) <= 6
    assert scenario.step == 60.0
    doc = Path(__file__).resolve().parents[1] / "docs" / "simulator.md"
    assert "default_scenario.yaml" in doc.read_text(encoding="utf-8")


def test_the_default_first_node_is_an_h200_mig_node_shared_by_several_tenants() -> None:
    fleet = SimulatedFleet(load_scenario(None))
    first = fleet.node_names()[0]
    assert first == "gpu-h200-mig-0"
    snap = fleet.node_snapshot(first, load_scenario(None).epoch_seconds + 86400)
    assert all(g.model == "NVIDIA H200" and g.sharing_mode is SharingMode.MIG for g in snap.gpus)
    assert len(snap.gpus) == 8
    assert sum(len(g.mig_instances) for g in snap.gpus) == 56
    assert len({a.tenant for a in snap.allocations}) >= 4


def test_the_default_fleet_has_ten_nodes_of_eight_gpus_with_every_sharing_mode() -> None:
    fleet = SimulatedFleet(load_scenario(None))
    plans = [fleet.node_plan(n) for n in fleet.node_names()]
    assert len(plans) == 10
    assert all(len(p.gpus) == 8 for p in plans)
    assert {p.pool.sharing for p in plans} == set(SharingMode)
    assert {p.model.short_name for p in plans} == {"H100", "H200", "A100"}


def test_every_mig_layout_in_the_default_scenario_is_valid() -> None:
    fleet = SimulatedFleet(load_scenario(None))
    checked = 0
    for name in fleet.node_names():
        plan = fleet.node_plan(name)
        for gpu in plan.gpus:
            if gpu.sharing is not SharingMode.MIG:
                continue
            gis = {}
            for i in gpu.devices:
                d = plan.devices[i]
                gis[d.gpu_instance_id] = d.profile
            assert layout_problems(gpu.model, gis.values()) == []
            checked += 1
    assert checked == 16


def test_a_split_gpu_instance_exists_in_the_default_scenario() -> None:
    scenario = load_scenario(None)
    splits = [gi for p in scenario.pools for layout in p.mig_layouts for gi in layout if gi.compute_instances]
    assert any(len(gi.compute_instances or []) == 2 for gi in splits)


@pytest.mark.parametrize(
    ("model", "valid", "invalid"),
    [
        ("H100", "[3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]", "[4g.40gb, 4g.40gb]"),
        ("H200", "[{profile: 3g.71gb, compute_instances: [1, 2]}, 2g.35gb, 1g.18gb, 1g.18gb]", "[7g.141gb, 1g.18gb]"),
        ("A100", "[4g.40gb, 3g.40gb]", "[3g.40gb, 3g.40gb, 1g.10gb]"),
    ],
)
def test_mig_layouts_are_checked_for_all_three_models(tmp_path: Path, model: str, valid: str, invalid: str) -> None:
    fill = {"model": model, "model_lower": model.lower()}
    scenario = load_scenario(write(tmp_path, MINIMAL.format(layout=valid, **fill)))
    fleet = SimulatedFleet(scenario)
    snap = fleet.node_snapshot(fleet.node_names()[0], scenario.epoch_seconds)
    assert snap.gpus[0].model == MODELS[model].name
    assert snap.gpus[0].mig_instances
    message = load_error(write(tmp_path, MINIMAL.format(layout=invalid, **fill)))
    assert "pools.0" in message and f"invalid {model} MIG layout" in message


def test_a_split_using_more_compute_slices_than_its_gpu_instance_is_rejected(tmp_path: Path) -> None:
    layout = "[{profile: 2g.35gb, compute_instances: [2, 1]}]"
    message = load_error(write(tmp_path, MINIMAL.format(layout=layout, model="H200", model_lower="h200")))
    assert "compute instances [2, 1] of 2g.35gb" in message


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, "pools: [\n  - name: x\n  bad: : :\n"))
    assert "not valid YAML" in message and "line" in message


def test_an_unknown_field_is_named(tmp_path: Path) -> None:
    text = MINIMAL.format(layout="[1g.18gb]", model="H200", model_lower="h200") + "colour: blue\n"
    message = load_error(write(tmp_path, text))
    assert "colour" in message and "Extra inputs are not permitted" in message


def test_an_unknown_gpu_model_is_named(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, MINIMAL.format(layout="[1g.10gb]", model="V100", model_lower="v100")))
    assert "pools.0" in message and "unknown GPU model 'V100'" in message


def test_an_unknown_mig_profile_is_named(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, MINIMAL.format(layout="[1g.5gb]", model="H200", model_lower="h200")))
    assert "H200 has no MIG profile '1g.5gb'" in message


def test_a_workload_on_an_unknown_pool_is_named(tmp_path: Path) -> None:
    text = MINIMAL.format(layout="[1g.18gb]", model="H200", model_lower="h200") + (
        "workloads:\n  - {name: w, tenant: team-a, archetype: notebook, pool: nowhere, shape: 1g.18gb}\n"
    )
    message = load_error(write(tmp_path, text))
    assert "workloads.0 (w).pool: unknown pool 'nowhere'" in message


def test_a_workload_that_does_not_fit_is_rejected(tmp_path: Path) -> None:
    text = MINIMAL.format(layout="[1g.18gb]", model="H200", model_lower="h200") + (
        "workloads:\n  - {name: w, tenant: team-a, archetype: notebook, pool: gpu-h200-mig, shape: 1g.18gb, pods: 3}\n"
    )
    message = load_error(write(tmp_path, text))
    assert "workload 'w': pod 3 of 3 does not fit" in message


def test_a_fault_on_an_unknown_node_is_named(tmp_path: Path) -> None:
    text = MINIMAL.format(layout="[1g.18gb]", model="H200", model_lower="h200") + (
        "faults:\n  - {kind: xid79, node: gpu-x-0, gpu: 0, at: 1h}\n"
    )
    assert "faults.0.node: unknown node 'gpu-x-0'" in load_error(write(tmp_path, text))


def test_a_quota_on_an_unknown_flavor_is_named(tmp_path: Path) -> None:
    text = MINIMAL.format(layout="[1g.18gb]", model="H200", model_lower="h200").replace(
        "namespaces: [{name: team-a}]", "namespaces: [{name: team-a}]\n    quotas: [{flavor: gold, nominal: 4}]"
    )
    assert "tenants.0.quotas.0.flavor: unknown flavor 'gold' (known: gpu-h200-mig)" in load_error(write(tmp_path, text))


def test_time_slicing_needs_replicas(tmp_path: Path) -> None:
    text = """
pools: [{name: ts, gpu_model: H100, sharing: time-slicing}]
tenants: [{name: a, namespaces: [{name: a}]}]
"""
    assert "replicas" in load_error(write(tmp_path, text))


def test_a_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read scenario"):
        load_scenario(tmp_path / "nope.yaml")


def test_the_benchmark_scenario_has_56_mig_instances_and_60_pods() -> None:
    scenario = load_scenario(SCENARIOS_DIR / "bench-h200-mig.yaml")
    fleet = SimulatedFleet(scenario)
    assert len(fleet.node_names()) == 1
    snap = fleet.node_snapshot(fleet.node_names()[0], scenario.epoch_seconds + 3600)
    assert [g.model for g in snap.gpus] == ["NVIDIA H200"] * 8
    assert sum(len(g.mig_instances) for g in snap.gpus) == 56
    assert len({a.pod for a in snap.allocations}) == 60


def test_a_name_used_twice_is_named(tmp_path: Path) -> None:
    text = """
pools: [{name: p, gpu_model: H100}, {name: p, gpu_model: A100}]
tenants: [{name: a, namespaces: [{name: a}]}]
"""
    assert "pool name 'p' is used twice" in load_error(write(tmp_path, text))
