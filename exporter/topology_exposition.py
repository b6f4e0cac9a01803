"""Prometheus families of GPU topology: NUMA / CPU affinity, NVLink link counts, peer links, fabric (info-style).

One series per GPU (``gpu_numa_info``, ``gpu_fabric_info``), per GPU and link state
(``gpu_nvlink_links``) and per ordered GPU pair of one node (``gpu_peer_info``: 56 on an 8-GPU node).
Each is absent where the hardware gave nothing; a label the hardware did not give is empty.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from gpulens.exporter.model import NodeSnapshot

PREFIX = "gpulens_"


def topology_families(snapshot: NodeSnapshot) -> Iterator[Metric]:
    """Topology series of every GPU that answered with topology readings."""
    node = snapshot.node
    numa = GaugeMetricFamily(PREFIX + "gpu_numa_info", "NUMA node and close CPUs of a GPU (always 1).",
                             labels=["node", "gpu", "numa_node", "cpu_affinity"])
    links = GaugeMetricFamily(PREFIX + "gpu_nvlink_links", "NVLink links of a GPU by state (active, inactive).",
                              labels=["node", "gpu", "state"])
    peers = GaugeMetricFamily(
        PREFIX + "gpu_peer_info", "How a GPU reaches another GPU of the node (always 1).",
        labels=["node", "gpu", "peer_gpu", "common_ancestor", "p2p_nvlink", "nvlink_domain"],
    )
    fabric = GaugeMetricFamily(PREFIX + "gpu_fabric_info", "NVLink fabric (NVSwitch domain) of a GPU (always 1).",
                               labels=["node", "gpu", "cluster_uuid", "clique_id", "state"])
    for gpu in snapshot.gpus:
        t = gpu.topology
        if t is None or not gpu.up:
            continue
        if t.numa_node is not None or t.cpu_affinity is not None:
            numa.add_metric([node, gpu.uuid, "" if t.numa_node is None else str(t.numa_node), t.cpu_affinity or ""], 1.0)
        if t.nvlink_active is not None:
            links.add_metric([node, gpu.uuid, "active"], float(t.nvlink_active))
        if t.nvlink_inactive is not None:
            links.add_metric([node, gpu.uuid, "inactive"], float(t.nvlink_inactive))
        for p in t.peers:
            peers.add_metric([node, gpu.uuid, p.peer_uuid, p.common_ancestor or "", p.p2p_nvlink or "",
                              gpu.nvlink_domain or ""], 1.0)
        if t.fabric is not None and t.fabric.state != "not_supported":
            f = t.fabric
            fabric.add_metric([node, gpu.uuid, f.cluster_uuid, str(f.clique_id), f.state], 1.0)
    yield from (numa, links, peers, fabric)
