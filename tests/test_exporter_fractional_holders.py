"""The exporter attributes pods that hold part of a GPU with that part (FakeKubelet, FakeKubernetesApi, FakeNvml)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.allocations import KubeletAllocationSource
from exporter.kubelet.client import PodResourcesClient
from exporter.nvml.source import NvmlDeviceSource
from gpulens.core.device_model import SharingMode
from gpulens.core.kube_api import KubernetesClient
from gpulens.core.tenancy.resolver import TenantResolver
from tests.fakes.kubelet import FakeKubelet, container, pod
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.fakes.nvml import FakeNvml
from tests.fakes.nvml_captures import H100_NO_MIG, load_capture

NODE = "gpu-node-1"
GPU = "GPU-44444444-0000-0000-0000-000000000004"


@pytest.fixture
def api() -> Iterator[FakeKubernetesApi]:
    with FakeKubernetesApi() as fake:
        yield fake


def test_hami_and_milli_gpu_holders_hold_their_fraction_and_the_rest_stays_free(
        api: FakeKubernetesApi, tmp_path: Path) -> None:
    api.add_pod("infer", "hami-30", NODE, limits={"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30",
                                                  "nvidia.com/gpumem": "8192"})
    api.add_pod("infer", "milli-450", NODE, limits={"alibabacloud.com/gpu-milli": "450"})
    api.add_pod("train", "whole", NODE, limits={"nvidia.com/gpu": "1"})
    fake = FakeNvml([load_capture(H100_NO_MIG, uuid=GPU)])
    devices = NvmlDeviceSource(fake, NODE, watch_xids=False)
    devices.read_devices(fake.now)
    with FakeKubelet(tmp_path) as kubelet:
        kubelet.pods = [pod("infer", "hami-30", [container("c", "nvidia.com/gpu", [f"{GPU}-0"])]),
                        pod("infer", "milli-450", [container("c", "nvidia.com/gpu", [f"{GPU}-1"])])]
        source = KubeletAllocationSource(PodResourcesClient(str(kubelet.socket)), directory=lambda: devices.directory,
                                         tenants=TenantResolver(KubernetesClient(api.url), NODE))
        got = {a.pod: (a.device_id, round(a.gpu_equivalents, 6), a.sharing_mode)
               for a in source.read_allocations(0.0)}
    devices.close()
    # 30 % of the cores is more than 8 GiB of an 80 GB H100; 450 milli-GPU is 0.45: 0.25 of the GPU is free
    assert got == {"hami-30": (GPU, 0.3, SharingMode.TIME_SLICING), "milli-450": (GPU, 0.45, SharingMode.TIME_SLICING)}


def test_a_holder_of_whole_gpus_still_holds_the_whole_device(api: FakeKubernetesApi, tmp_path: Path) -> None:
    api.add_pod("train", "whole", NODE, limits={"nvidia.com/gpu": "1"})
    fake = FakeNvml([load_capture(H100_NO_MIG, uuid=GPU)])
    devices = NvmlDeviceSource(fake, NODE, watch_xids=False)
    devices.read_devices(fake.now)
    with FakeKubelet(tmp_path) as kubelet:
        kubelet.pods = [pod("train", "whole", [container("c", "nvidia.com/gpu", [GPU])])]
        source = KubeletAllocationSource(PodResourcesClient(str(kubelet.socket)), directory=lambda: devices.directory,
                                         tenants=TenantResolver(KubernetesClient(api.url), NODE))
        got = [(a.device_id, a.gpu_equivalents, a.sharing_mode) for a in source.read_allocations(0.0)]
    devices.close()
    assert got == [(GPU, 1.0, SharingMode.EXCLUSIVE)]


def test_kai_fraction_pods_hold_their_fraction_of_the_gpu_their_groups_reservation_pod_holds(
        api: FakeKubernetesApi, tmp_path: Path) -> None:
    group = {"runai-gpu-group": "g-1"}
    api.add_pod("kai-resource-reservation", "reservation-g-1", NODE, labels=group, limits={"nvidia.com/gpu": "1"})
    api.add_pod("infer", "half", NODE, labels=group, annotations={"gpu-fraction": "0.5"})
    api.add_pod("infer", "quarter", NODE, labels=group, annotations={"gpu-fraction": "0.25"})
    api.add_pod("infer", "other-group", NODE, labels={"runai-gpu-group": "g-2"}, annotations={"gpu-fraction": "0.5"})
    fake = FakeNvml([load_capture(H100_NO_MIG, uuid=GPU)])
    devices = NvmlDeviceSource(fake, NODE, watch_xids=False)
    devices.read_devices(fake.now)
    with FakeKubelet(tmp_path) as kubelet:  # the fraction pods hold no device in PodResources: the reservation pod does
        kubelet.pods = [pod("kai-resource-reservation", "reservation-g-1", [container("c", "nvidia.com/gpu", [GPU])])]
        source = KubeletAllocationSource(PodResourcesClient(str(kubelet.socket)), directory=lambda: devices.directory,
                                         tenants=TenantResolver(KubernetesClient(api.url), NODE))
        got = {(a.namespace, a.pod): (a.device_id, a.gpu_equivalents, a.sharing_mode)
               for a in source.read_allocations(0.0)}
    devices.close()
    assert got == {("infer", "half"): (GPU, 0.5, SharingMode.TIME_SLICING),
                   ("infer", "quarter"): (GPU, 0.25, SharingMode.TIME_SLICING)}
