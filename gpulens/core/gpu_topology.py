"""Per-GPU topology readings: NVLink links and peers, PCIe common ancestor, NUMA node, CPU affinity, fabric.

Frozen dataclasses that the NVML source and the simulator both return (``Gpu.topology``). A reading
the hardware does not give is ``None`` (absent), never a made-up value. ``nvlink_domain`` turns
them into one domain id per GPU: the fabric clique where NVML gives one (it spans nodes, e.g. GB200
NVL72), else the set of GPUs of this node joined by NVLink (transitively), else ``None``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# nvmlGpuTopologyLevel_t (nvml.h): the closest PCIe ancestor two GPUs share.
ANCESTOR_NAMES = {0: "internal", 10: "single", 20: "multiple", 30: "hostbridge", 40: "node", 50: "system"}
"""``internal`` = same board; ``single`` one PCIe switch; ``multiple`` several switches; ``hostbridge``
the same host bridge; ``node`` the same NUMA node (CPU); ``system`` across NUMA nodes (SMP interconnect)."""

# nvmlGpuP2PStatus_t
P2P_STATUS_NAMES = {
    0: "ok", 1: "chipset_not_supported", 2: "gpu_not_supported", 3: "ioh_topology_not_supported",
    4: "disabled_by_regkey", 5: "not_supported", 6: "unknown",
}

# nvmlGpuFabricState_t
FABRIC_STATE_NAMES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}


@dataclass(frozen=True)
class PeerLink:
    """What one GPU knows about another GPU of the same node."""

    peer_index: int
    peer_uuid: str
    common_ancestor: str | None = None
    """A name of ``ANCESTOR_NAMES``; None when NVML does not say."""
    p2p_nvlink: str | None = None
    """P2P status over NVLink (a name of ``P2P_STATUS_NAMES``): ``ok`` means NVLink peers."""

    @property
    def nvlink_peer(self) -> bool:
        return self.p2p_nvlink == "ok"


@dataclass(frozen=True)
class FabricInfo:
    """``nvmlGpuFabricInfo(V)``: the NVLink fabric (NVSwitch domain) a GPU joined, once registration completed."""

    cluster_uuid: str
    clique_id: int
    state: str
    """A name of ``FABRIC_STATE_NAMES``; cluster and clique are meaningful only when ``completed``."""
    status: int | None = None
    """NVML return code of the registration (0 = success), valid only when ``completed``."""

    @property
    def domain(self) -> str | None:
        if self.state != "completed" or self.status not in (0, None):
            return None
        return f"fabric:{self.cluster_uuid}/{self.clique_id}"


@dataclass(frozen=True)
class GpuTopology:
    """Topology of one GPU: every field is None where the hardware gives none."""

    numa_node: int | None = None
    cpu_affinity: str | None = None
    """CPUs close to the GPU as a Linux cpulist (``0-55,112-167``)."""
    nvlink_active: int | None = None
    """NVLink links up; None when the GPU has no NVLink (or NVML does not say)."""
    nvlink_inactive: int | None = None
    peers: tuple[PeerLink, ...] = ()
    fabric: FabricInfo | None = None


def cpulist(cpus: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``0-2,5`` (the Linux cpulist format)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for c in ordered:
        if start is None:
            start = prev = c
        elif prev is not None and c == prev + 1:
            prev = c
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = c
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)


def cpus_from_masks(masks: Sequence[int], bits: int = 64) -> list[int]:
    """CPU numbers set in NVML's array of affinity words (word i holds CPUs ``i*bits .. i*bits+bits-1``)."""
    return [i * bits + b for i, word in enumerate(masks) for b in range(bits) if int(word) >> b & 1]


def nvlink_domains(node: str, indices: Sequence[int], topologies: Sequence[GpuTopology | None]) -> list[str | None]:
    """One NVLink domain id per GPU: its fabric clique, else its NVLink-connected group on
    ``node`` (itself alone when it has no NVLink peer), else None (nothing known)."""
    parent = {i: i for i in indices}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, topo in zip(indices, topologies, strict=True):
        for peer in topo.peers if topo is not None else ():
            if peer.nvlink_peer and peer.peer_index in parent:
                a, b = find(i), find(peer.peer_index)
                parent[max(a, b)] = min(a, b)
    out: list[str | None] = []
    for i, topo in zip(indices, topologies, strict=True):
        fabric = topo.fabric.domain if topo is not None and topo.fabric is not None else None
        if fabric is not None:
            out.append(fabric)
        elif topo is not None and (topo.peers or topo.nvlink_active is not None):
            out.append(f"{node}/nvlink-{find(i)}")  # a GPU without NVLink peers is a domain of its own
        else:
            out.append(None)
    return out
