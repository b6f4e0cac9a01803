"""Topology of a node's GPUs from NVML, read once through the funnel: NUMA, CPU affinity, NVLink, peers, fabric.

Calls (nvml.h, NVML API reference): ``nvmlDeviceGetMemoryAffinity(h, n, NVML_AFFINITY_SCOPE_NODE)`` (NUMA
node = lowest set bit), ``nvmlDeviceGetCpuAffinity(h, n)`` (64-bit CPU words), ``nvmlDeviceGetNvLinkState(h,
link)`` for every link index (``NOT_SUPPORTED`` on link 0: no NVLink; ``INVALID_ARGUMENT`` past the last
link: stop), ``nvmlDeviceGetTopologyCommonAncestor(h1, h2)``, ``nvmlDeviceGetP2PStatus(h1, h2, NVLINK)``
(index 2, passed as an int: pynvml's ``NVML_P2P_CAPS_INDEX_READ`` is a tuple) and
``nvmlDeviceGetGpuFabricInfoV(h, &info)`` with the v2 struct (``state`` masked to a byte; cluster and
clique only meaningful once ``state`` is COMPLETED). Everything absent stays ``None``.
"""

from __future__ import annotations

import ctypes
import uuid as uuidlib
from collections.abc import Sequence
from typing import Any

from exporter.nvml.funnel import NvmlFunnel
from gpulens.core.gpu_topology import (
    ANCESTOR_NAMES,
    FABRIC_STATE_NAMES,
    P2P_STATUS_NAMES,
    FabricInfo,
    GpuTopology,
    PeerLink,
    cpulist,
    cpus_from_masks,
)

P2P_CAPS_INDEX_NVLINK = 2
AFFINITY_SCOPE_NODE = 0
NUMA_WORDS = 4
"""64-bit words asked for: 256 NUMA nodes."""
CPU_WORDS = 64
"""64-bit words asked for: 4096 CPUs."""
MAX_LINKS = 36
"""``NVML_NVLINK_MAX_LINKS`` of the CUDA 13 headers (18 from NVML 11.8, 12 before): asking past the last link
answers INVALID_ARGUMENT, which ends the scan."""


def read_numa(funnel: NvmlFunnel, handle: Any) -> int | None:
    masks = funnel.call("nvmlDeviceGetMemoryAffinity", handle, NUMA_WORDS, AFFINITY_SCOPE_NODE)
    nodes = cpus_from_masks(list(masks)) if masks is not None else []
    return nodes[0] if nodes else None


def read_cpu_affinity(funnel: NvmlFunnel, handle: Any) -> str | None:
    masks = funnel.call("nvmlDeviceGetCpuAffinity", handle, CPU_WORDS)
    cpus = cpus_from_masks(list(masks)) if masks is not None else []
    return cpulist(cpus) if cpus else None


def read_nvlink(funnel: NvmlFunnel, handle: Any) -> tuple[int | None, int | None]:
    """(active, inactive) links; (None, None) when the GPU has no NVLink."""
    active = inactive = 0
    for link in range(MAX_LINKS):
        state = funnel.call("nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            if link == 0:
                return None, None
            break
        if int(state):
            active += 1
        else:
            inactive += 1
    return active, inactive


def read_fabric(funnel: NvmlFunnel, nvml: Any, handle: Any) -> FabricInfo | None:
    struct_type = getattr(nvml, "c_nvmlGpuFabricInfoV_t", None)
    if struct_type is None or not funnel.has("nvmlDeviceGetGpuFabricInfoV"):
        return None
    info = struct_type()
    if funnel.call("nvmlDeviceGetGpuFabricInfoV", handle, ctypes.byref(info)) is None:
        return None
    state = FABRIC_STATE_NAMES.get(int(info.state) & 0xFF, "unknown")
    if state == "not_supported":
        return None
    cluster = str(uuidlib.UUID(bytes=bytes(bytearray(info.clusterUuid)[:16])))
    return FabricInfo(cluster, int(info.cliqueId), state, int(info.status) if state == "completed" else None)


def read_peer(funnel: NvmlFunnel, handle: Any, peer_index: int, peer_uuid: str, peer_handle: Any) -> PeerLink:
    level = funnel.call("nvmlDeviceGetTopologyCommonAncestor", handle, peer_handle)
    status = funnel.call("nvmlDeviceGetP2PStatus", handle, peer_handle, P2P_CAPS_INDEX_NVLINK)
    return PeerLink(
        peer_index, peer_uuid,
        ANCESTOR_NAMES.get(int(level)) if level is not None else None,
        P2P_STATUS_NAMES.get(int(status), "unknown") if status is not None else None,
    )


def read_topology(funnel: NvmlFunnel, nvml: Any, gpus: Sequence[tuple[int, str, Any]]) -> dict[str, GpuTopology]:
    """GPU UUID -> topology, for ``(index, uuid, handle)`` of every GPU of the node."""
    out = {}
    for _index, uuid, handle in gpus:
        active, inactive = read_nvlink(funnel, handle)
        out[uuid] = GpuTopology(
            numa_node=read_numa(funnel, handle),
            cpu_affinity=read_cpu_affinity(funnel, handle),
            nvlink_active=active,
            nvlink_inactive=inactive,
            peers=tuple(read_peer(funnel, handle, j, u, h) for j, u, h in gpus if u != uuid),
            fabric=read_fabric(funnel, nvml, handle),
        )
    return out
