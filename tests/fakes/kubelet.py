"""FakeKubelet: a real gRPC PodResources server on a temporary unix socket, answering what a test sets."""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from exporter.kubelet.proto import api_pb2, api_pb2_grpc


def pod(namespace: str, name: str, containers: list[api_pb2.ContainerResources]) -> api_pb2.PodResources:
    return api_pb2.PodResources(namespace=namespace, name=name, containers=containers)


def container(name: str, resource: str = "nvidia.com/gpu", ids: list[str] | None = None,
              claims: list[api_pb2.DynamicResource] | None = None) -> api_pb2.ContainerResources:
    devices = [api_pb2.ContainerDevices(resource_name=resource, device_ids=ids)] if ids else []
    return api_pb2.ContainerResources(name=name, devices=devices, dynamic_resources=claims or [])


def dra_claim(claim: str, namespace: str, pool: str, device: str,
              driver: str = "gpu.nvidia.com") -> api_pb2.DynamicResource:
    return api_pb2.DynamicResource(claim_name=claim, claim_namespace=namespace, claim_resources=[
        api_pb2.ClaimResource(driver_name=driver, pool_name=pool, device_name=device)])


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def List(self, request: Any, context: Any) -> api_pb2.ListPodResourcesResponse:  # noqa: N802
        self.kubelet.list_calls += 1
        if self.kubelet.hang_seconds:
            self.kubelet.release.wait(self.kubelet.hang_seconds)
        return api_pb2.ListPodResourcesResponse(pod_resources=self.kubelet.pods)

    def GetAllocatableResources(self, request: Any, context: Any) -> api_pb2.AllocatableResourcesResponse:  # noqa: N802
        self.kubelet.allocatable_calls += 1
        return api_pb2.AllocatableResourcesResponse(devices=self.kubelet.allocatable)


class FakeKubelet:
    """Serves ``List`` / ``GetAllocatableResources`` on ``<dir>/kubelet.sock``; ``hang_seconds`` delays List."""

    def __init__(self, directory: Path) -> None:
        self.socket = directory / "kubelet.sock"
        self.pods: list[api_pb2.PodResources] = []
        self.allocatable: list[api_pb2.ContainerDevices] = []
        self.hang_seconds = 0.0
        self.release = threading.Event()
        self.list_calls = 0
        self.allocatable_calls = 0
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                                   options=[("grpc.max_send_message_length", 64 << 20)])
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), self._server)
        self._server.add_insecure_port(f"unix://{self.socket}")

    def __enter__(self) -> FakeKubelet:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._server.stop(grace=0)
