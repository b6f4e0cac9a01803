"""Opening the real-node backend: NVML for devices, the kubelet (+ Kubernetes API) for allocations."""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from exporter.allocations import KubeletAllocationSource
from exporter.kubelet.client import PodResourcesClient
from exporter.kubelet.dra import ResourceSliceDirectory
from exporter.nvml.source import NvmlDeviceSource
from exporter.settings import ExporterSettings
from gpulens.core.device_model import AllocationSource, DeviceSource
from gpulens.core.errors import UserError
from gpulens.core.kube_api import KubernetesClient, KubernetesReads, in_cluster_connection
from gpulens.core.tenancy.resolver import TenantResolver
from gpulens.core.tenancy.rules import load_tenancy_config

log = logging.getLogger(__name__)


def node_name(settings: ExporterSettings) -> str:
    """``--node``, else ``$NODE_NAME`` (Downward API), else the host name."""
    return settings.node or os.environ.get("NODE_NAME") or socket.gethostname()


def open_nvml_backend(
    settings: ExporterSettings, *, nvml: Any = None, kube_api: KubernetesReads | None = None
) -> tuple[DeviceSource, AllocationSource]:
    """(NVML device source, kubelet allocation source); ``UserError`` when NVML cannot load.

    ``nvml`` defaults to the real ``pynvml``; ``kube_api`` to the in-cluster API server (none outside a
    cluster: tenants are then namespace names and DRA claims cannot be resolved).
    """
    config = load_tenancy_config(settings.tenancy_config)
    if nvml is None:
        import pynvml

        nvml = pynvml
    node = node_name(settings)
    try:
        devices = NvmlDeviceSource(nvml, node, attribute_processes=settings.attribute_processes)
    except nvml.NVMLError as exc:
        raise UserError(
            f"NVML cannot load ({exc}): is the NVIDIA driver installed and does the container see "
            "libnvidia-ml.so.1 (NVIDIA container runtime)? Use --backend sim to run without GPUs"
        ) from exc
    api = kube_api
    if api is None and (connection := in_cluster_connection()) is not None:
        api = KubernetesClient(connection, timeout_s=config.api_timeout_seconds)
    if api is None:
        log.warning("no Kubernetes API (not in a cluster): tenants fall back to namespace names, no DRA")
    client = PodResourcesClient(settings.kubelet_socket, timeout_seconds=settings.kubelet_timeout_seconds)
    allocations = KubeletAllocationSource(
        client,
        directory=lambda: devices.directory,
        tenants=TenantResolver(api, node, config) if api is not None else None,
        slices=ResourceSliceDirectory(api, node, min_refresh=config.cache_seconds) if api is not None else None,
    )
    devices.replicas = allocations.advertised_replicas  # time-sliced GPUs are reported as such
    return devices, allocations
