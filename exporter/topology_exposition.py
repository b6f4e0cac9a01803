"""Prometheus families of GPU topology: NUMA / CPU affinity, NVLink link counts, peer links, fabric (info-style).

One series per GPU (``gpu_numa_info``, ``gpu_fabric_info``), per GPU and link state
(``gpu_nvlink_links``) and per ordered GPU pair of one node (``gpu_peer_info``: 56 on an 8-GPU node).
Each is absent where the hardware gave nothing; a label the hardware did not give is empty.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.families import new_family
from gpulens.core import metric_catalog as M
from gpulens.core.device_model import NodeSnapshot


def topology_families(snapshot: NodeSnapshot) -> Iterator[Metric]:
    """Topology series of every GPU that answered with topology readings."""
    node = snapshot.node
    numa = new_family(M.GPU_NUMA_INFO)
    links = new_family(M.GPU_NVLINK_LINKS)
    peers = new_family(M.GPU_PEER_INFO)
    fabric = new_family(M.GPU_FABRIC_INFO)
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
