"""GPU topology read through the NVML funnel, on FakeNvml answers shaped as NVML's structures, and its series."""

from __future__ import annotations

from dataclasses import replace

import pynvml
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition import render_text
from exporter.nvml.source import NvmlDeviceSource
from exporter.topology_exposition import topology_families
from gpulens.core.device_model import NodeSnapshot
from tests.fakes.nvml import FakeGpu, FakeNvml
from tests.fakes.nvml_captures import H100_NO_MIG, load_capture

UUIDS = [f"GPU-0000000{i}-0000-4000-8000-00000000000{i}" for i in range(4)]
CLUSTER = bytes.fromhex("c0ffee00000040008000000000000001")


def hgx_gpu(i: int) -> FakeGpu:
    """An HGX H100 GPU: 18 NVLinks up to the NVSwitches, every other GPU an NVLink peer, NUMA by board half."""
    base = load_capture(H100_NO_MIG, uuid=UUIDS[i])
    return replace(
        base, numa_node=i // 2, cpus=list(range(56 * (i // 2), 56 * (i // 2 + 1))), nvlink_states=[1] * 18,
        ancestors={u: (pynvml.NVML_TOPOLOGY_SINGLE if j // 2 == i // 2 else pynvml.NVML_TOPOLOGY_SYSTEM)
                   for j, u in enumerate(UUIDS) if j != i},
        p2p_nvlink={u: pynvml.NVML_P2P_STATUS_OK for u in UUIDS if u != UUIDS[i]},
        fabric=(CLUSTER, 3, pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, pynvml.NVML_SUCCESS),
    )


def source(gpus: list[FakeGpu]) -> NvmlDeviceSource:
    return NvmlDeviceSource(FakeNvml(gpus), "node-a", watch_xids=False)


def test_an_hgx_node_reports_numa_cpus_links_peers_and_fabric_clique() -> None:
    readings = source([hgx_gpu(i) for i in range(4)]).read_devices(1_000.0)
    gpu = readings.gpus[2]
    t = gpu.topology
    assert t is not None
    assert (t.numa_node, t.cpu_affinity) == (1, "56-111")
    assert (t.nvlink_active, t.nvlink_inactive) == (18, 0)
    assert {(p.peer_uuid, p.common_ancestor, p.p2p_nvlink) for p in t.peers} == {
        (UUIDS[0], "system", "ok"), (UUIDS[1], "system", "ok"), (UUIDS[3], "single", "ok")}
    assert t.fabric is not None and (t.fabric.cluster_uuid, t.fabric.clique_id) == (
        "c0ffee00-0000-4000-8000-000000000001", 3)
    assert {g.nvlink_domain for g in readings.gpus} == {"fabric:c0ffee00-0000-4000-8000-000000000001/3"}


def test_pcie_cards_with_bridges_form_nvlink_pairs_and_have_no_fabric() -> None:
    gpus = []
    for i in range(4):
        g = hgx_gpu(i)
        gpus.append(replace(g, fabric=None, nvlink_states=[1, 1, 1, 1],
                            p2p_nvlink={u: pynvml.NVML_P2P_STATUS_OK for j, u in enumerate(UUIDS) if j // 2 == i // 2 and j != i}))
    readings = source(gpus).read_devices(1_000.0)
    assert [g.nvlink_domain for g in readings.gpus] == ["node-a/nvlink-0"] * 2 + ["node-a/nvlink-2"] * 2
    assert all(g.topology is not None and g.topology.fabric is None for g in readings.gpus)


def test_a_gpu_without_topology_answers_has_every_reading_absent_not_zero() -> None:
    readings = source([load_capture(H100_NO_MIG, uuid=UUIDS[0]), load_capture(H100_NO_MIG, uuid=UUIDS[1])]).read_devices(1.0)
    t = readings.gpus[0].topology
    assert t is not None
    assert (t.numa_node, t.cpu_affinity, t.nvlink_active, t.nvlink_inactive, t.fabric) == (None,) * 5
    assert [(p.common_ancestor, p.p2p_nvlink) for p in t.peers] == [(None, "not_supported")]
    text = render_text(topology_families(NodeSnapshot("node-a", 1.0, readings.gpus))).decode()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert {s.name for s in samples} == {"gpulens_gpu_peer_info"}  # no NUMA, link or fabric series at all


def test_link_scan_stops_at_the_last_link_and_counts_links_that_are_down() -> None:
    gpu = replace(hgx_gpu(0), nvlink_states=[1] * 16 + [0, 0])
    fake = FakeNvml([gpu])
    src = NvmlDeviceSource(fake, "node-a", watch_xids=False)
    t = src.read_devices(1.0).gpus[0].topology
    assert t is not None and (t.nvlink_active, t.nvlink_inactive) == (16, 2)
    assert fake.count_calls("nvmlDeviceGetNvLinkState") == 19  # 18 links, then INVALID_ARGUMENT ends the scan


def test_topology_is_read_once_not_every_cycle() -> None:
    fake = FakeNvml([hgx_gpu(i) for i in range(2)])
    src = NvmlDeviceSource(fake, "node-a", watch_xids=False)
    before = fake.count_calls("nvmlDeviceGetTopologyCommonAncestor")
    src.read_devices(1.0)
    src.read_devices(2.0)
    assert before == 2 and fake.count_calls("nvmlDeviceGetTopologyCommonAncestor") == before


def test_the_series_carry_numa_links_peers_and_fabric() -> None:
    readings = source([hgx_gpu(i) for i in range(2)]).read_devices(1.0)
    text = render_text(topology_families(NodeSnapshot("node-a", 1.0, readings.gpus))).decode()
    by_name: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            by_name.setdefault(s.name, []).append(s.labels)
    assert {"numa_node": "0", "cpu_affinity": "0-55"}.items() <= by_name["gpulens_gpu_numa_info"][0].items()
    assert len(by_name["gpulens_gpu_peer_info"]) == 2  # one per ordered pair
    assert by_name["gpulens_gpu_fabric_info"][0]["clique_id"] == "3"
    assert {s["state"] for s in by_name["gpulens_gpu_nvlink_links"]} == {"active", "inactive"}
