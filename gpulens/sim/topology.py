"""The simulated fleet's topology: NVLink, PCIe and NUMA layout of each node, and its rack / block labels.

Shapes modelled (as the hardware is built):

* ``nvswitch`` (HGX H100/H200 8-GPU): every GPU is an NVLink peer of every other through the four
  NVSwitches (18 links up per GPU); the PCIe tree puts GPU pairs behind one PCIe switch and halves of
  the board on each CPU socket.
* ``nvlink-pairs`` (PCIe cards with NVLink bridges, e.g. A100 PCIe): GPUs 2k and 2k+1 are NVLink peers
  (12 links on A100 with a 3-way bridge; 4 on others); all others talk over PCIe.
* ``pcie``: no NVLink.

GPUs are spread over the host's NUMA nodes in index order (two by default: GPUs 0-3 on NUMA 0, 4-7 on
NUMA 1, each with its socket's cores). No fabric (``nvmlDeviceGetGpuFabricInfo``) is simulated: an HGX
board is not a multi-node NVLink domain, so the reading is absent, as on real HGX nodes without IMEX.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpulens.core.gpu_topology import GpuTopology, PeerLink, cpulist, nvlink_domains
from gpulens.sim.scenario import Interconnect, PoolSpec

if TYPE_CHECKING:
    from gpulens.sim.plan import NodePlan

HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
BLOCK_LABEL = "cloud.google.com/gce-topology-block"
SUBBLOCK_LABEL = "cloud.google.com/gce-topology-subblock"
HOST_LABEL = "cloud.google.com/gce-topology-host"

_NVSWITCH_LINKS = {"H100": 18, "H200": 18, "A100": 12}
_BRIDGE_LINKS = {"A100": 12}


def interconnect(pool: PoolSpec) -> Interconnect:
    """The pool's interconnect, defaulting by model: HGX (NVSwitch) for Hopper, NVLink pairs otherwise."""
    if pool.interconnect is not None:
        return pool.interconnect
    return Interconnect.NVSWITCH if pool.model.short_name in ("H100", "H200") else Interconnect.NVLINK_PAIRS


def numa_of(pool: PoolSpec, gpu_index: int) -> int:
    """NUMA node of a GPU: the host's GPUs are split evenly over its NUMA nodes in index order."""
    per = max(1, -(-pool.gpus_per_node // pool.topology.numa_nodes))
    return min(gpu_index // per, pool.topology.numa_nodes - 1)


def _ancestor(pool: PoolSpec, a: int, b: int, fabric: Interconnect) -> str:
    if numa_of(pool, a) != numa_of(pool, b):
        return "system"
    if a // 2 == b // 2:
        return "single"  # a pair shares one PCIe switch (HGX) or one riser (PCIe cards)
    return "node" if fabric is Interconnect.NVSWITCH else "hostbridge"


def _nvlink_peer(a: int, b: int, fabric: Interconnect) -> bool:
    if fabric is Interconnect.NVSWITCH:
        return True
    return fabric is Interconnect.NVLINK_PAIRS and a // 2 == b // 2


def gpu_topology(pool: PoolSpec, gpu_uuids: list[str], index: int) -> GpuTopology:
    """What NVML would answer for GPU ``index`` of a node of ``pool`` (``gpu_uuids`` in index order)."""
    fabric = interconnect(pool)
    model = pool.model.short_name
    numa = numa_of(pool, index)
    cpus = pool.topology.cpus_per_numa
    peers = tuple(
        PeerLink(j, uuid, _ancestor(pool, index, j, fabric), "ok" if _nvlink_peer(index, j, fabric) else "not_supported")
        for j, uuid in enumerate(gpu_uuids) if j != index
    )
    if fabric is Interconnect.NVSWITCH:
        active, inactive = _NVSWITCH_LINKS.get(model, 18), 0
    elif fabric is Interconnect.NVLINK_PAIRS:
        has_pair = index // 2 * 2 + 1 < len(gpu_uuids)
        links = _BRIDGE_LINKS.get(model, 4)
        active, inactive = (links, 0) if has_pair else (0, links)
    else:
        return GpuTopology(numa_node=numa, cpu_affinity=cpulist(range(numa * cpus, (numa + 1) * cpus)), peers=peers)
    return GpuTopology(
        numa_node=numa, cpu_affinity=cpulist(range(numa * cpus, (numa + 1) * cpus)),
        nvlink_active=active, nvlink_inactive=inactive, peers=peers, fabric=None,
    )


def node_topology_labels(pool: PoolSpec, node: str) -> dict[str, str]:
    """Kubernetes topology labels of a simulated node (hostname, zone, GKE-style block / sub-block / host)."""
    i = pool.node_names().index(node)
    t = pool.topology
    labels = {HOSTNAME_LABEL: node, ZONE_LABEL: t.zone}
    if t.blocks:
        labels[BLOCK_LABEL] = t.blocks[i % len(t.blocks)]
    if t.subblocks:
        labels[SUBBLOCK_LABEL] = t.subblocks[i % len(t.subblocks)]
    if t.blocks or t.subblocks:
        labels[HOST_LABEL] = f"host-{node}"
    return labels


def node_topology(plan: NodePlan) -> tuple[tuple[GpuTopology, ...], tuple[str | None, ...]]:
    """Topology of every GPU of a node and its NVLink domain id, in GPU index order."""
    uuids = [g.uuid for g in plan.gpus]
    topologies = tuple(gpu_topology(plan.pool, uuids, g.index) for g in plan.gpus)
    domains = tuple(nvlink_domains(plan.name, [g.index for g in plan.gpus], list(topologies)))
    return topologies, domains


def topology_rows(plan: NodePlan, seen: dict[str, int]) -> list[dict[str, object]]:
    """Rows of the store's ``gpu_topology`` table for one node (``seen``: first/last seen columns)."""
    topologies, domains = node_topology(plan)
    return [
        {
            "gpu_uuid": g.uuid, "node": plan.name, "gpu_index": g.index, "numa_node": t.numa_node,
            "cpu_affinity": t.cpu_affinity, "nvlink_domain": d,
            "nvlink_peers": sum(1 for p in t.peers if p.nvlink_peer),
            "fabric_cluster_uuid": t.fabric.cluster_uuid if t.fabric else None,
            "fabric_clique_id": t.fabric.clique_id if t.fabric else None, **seen,
        }
        for g, t, d in zip(plan.gpus, topologies, domains, strict=True)
    ]
