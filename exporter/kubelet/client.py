"""kubelet PodResources v1 client: real gRPC over the kubelet's unix socket, one channel reused.

Called from the collection cycle only (never on the scrape path), with a short timeout and a 16 MiB
receive limit (busy nodes answer more than gRPC's 4 MiB default). At most ``MAX_GPU_GRANTS`` GPU grants
of a reply become Python objects, each sharing its pod's and container's strings, so the memory a reply
takes is bounded by the receive limit (deploy/base sets the exporter's memory limit from both). Any
failure becomes
:class:`KubeletUnavailableError` with a one-line reason; the cycle counts it and keeps serving device
metrics without pod labels.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

import grpc

from exporter.kubelet.device_ids import is_gpu_resource, shared_base
from exporter.kubelet.proto import api_pb2, api_pb2_grpc

DEFAULT_SOCKET = "unix:///var/lib/kubelet/pod-resources/kubelet.sock"
MAX_RECEIVE_BYTES = 16 * 1024 * 1024
MAX_GPU_GRANTS = 65536
"""GPU device ids and DRA devices held by containers that one reply may list: far above a real node
(8 GPUs x 7 MIG instances x 256 time-slicing replicas is 14,336); a reply with more is refused."""
DRA_DRIVER = "gpu.nvidia.com"
KUBELET_SOURCE = "kubelet"
"""``source`` label of kubelet PodResources calls that failed."""


class KubeletUnavailableError(RuntimeError):
    """The kubelet PodResources API did not answer (no socket, timeout, refused, too large...)."""

    source = KUBELET_SOURCE


@dataclass(frozen=True)
class DeviceGrant:
    """One device id held by one container (device plugin path)."""

    namespace: str
    pod: str
    container: str
    resource_name: str
    device_id: str


@dataclass(frozen=True)
class ClaimGrant:
    """One DRA device held by one container (``dynamic_resources``)."""

    namespace: str
    pod: str
    container: str
    claim_name: str
    claim_namespace: str
    driver: str
    pool: str
    device: str


@dataclass(frozen=True)
class PodResourcesView:
    """The GPU part of a ``List`` answer."""

    devices: tuple[DeviceGrant, ...]
    claims: tuple[ClaimGrant, ...]


def parse_list_response(
    response: api_pb2.ListPodResourcesResponse, extra_resources: tuple[str, ...] = ()
) -> PodResourcesView:
    """Keep the GPU devices (``nvidia.com/gpu``, ``nvidia.com/mig-*``) and NVIDIA DRA claims of every container.

    More than ``MAX_GPU_GRANTS`` of them raise ``KubeletUnavailableError`` before they are built.
    """
    devices: list[DeviceGrant] = []
    claims: list[ClaimGrant] = []
    for pod in response.pod_resources:
        namespace, name = pod.namespace, pod.name  # one string per pod, shared by its grants
        for c in pod.containers:
            container = c.name
            for d in c.devices:
                resource = d.resource_name
                if is_gpu_resource(resource, extra_resources):
                    _check_grants(len(devices) + len(claims) + len(d.device_ids))
                    devices.extend(DeviceGrant(namespace, name, container, resource, i) for i in d.device_ids)
            for dr in c.dynamic_resources:
                _check_grants(len(devices) + len(claims) + len(dr.claim_resources))
                claim, claim_namespace = dr.claim_name, dr.claim_namespace
                for cr in dr.claim_resources:
                    if cr.driver_name == DRA_DRIVER:
                        claims.append(ClaimGrant(namespace, name, container, claim, claim_namespace, DRA_DRIVER,
                                                 cr.pool_name, cr.device_name))
    return PodResourcesView(tuple(devices), tuple(claims))


def _check_grants(count: int) -> None:
    if count > MAX_GPU_GRANTS:
        raise KubeletUnavailableError(f"kubelet PodResources List lists more than {MAX_GPU_GRANTS} GPU grants: "
                                      "refused (no node holds that many)")


def replicas_per_device(response: api_pb2.AllocatableResourcesResponse) -> dict[str, int]:
    """Base device id -> advertised replicas (``GPU-x::0..n-1`` under time-slicing; 1 otherwise)."""
    counts: dict[str, int] = {}
    for d in response.devices:
        if not is_gpu_resource(d.resource_name):
            continue
        for raw in d.device_ids:
            key = shared_base(raw)
            counts[key] = counts.get(key, 0) + 1
    return counts


class PodResourcesClient:
    """``List`` and ``GetAllocatableResources`` on the kubelet socket, over one reused channel."""

    def __init__(self, socket: str = DEFAULT_SOCKET, *, timeout_seconds: float = 2.0) -> None:
        self.target = socket if socket.startswith("unix://") else f"unix://{socket}"
        self.path = self.target.removeprefix("unix://")
        self.timeout = timeout_seconds
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None

    def list(self) -> api_pb2.ListPodResourcesResponse:
        return self._call("List", api_pb2.ListPodResourcesRequest())

    def allocatable(self) -> api_pb2.AllocatableResourcesResponse:
        return self._call("GetAllocatableResources", api_pb2.AllocatableResourcesRequest())

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = self._stub = None

    def _call(self, method: str, request: Any) -> Any:
        if not os.path.exists(self.path):
            raise KubeletUnavailableError(f"kubelet PodResources socket {self.path} does not exist")
        stub = self._connect()
        try:
            return getattr(stub, method)(request, timeout=self.timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            name = code.name if code is not None else "ERROR"
            raise KubeletUnavailableError(f"kubelet PodResources {method} failed: {name}: {detail}") from exc

    def _connect(self) -> api_pb2_grpc.PodResourcesListerStub:
        with self._lock:
            if self._stub is None:
                self._channel = grpc.insecure_channel(
                    self.target,
                    options=[("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
                             ("grpc.enable_http_proxy", 0)],
                )
                self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
            return self._stub
