"""The kubelet PodResources client and allocation source against FakeKubelet (real gRPC, unix socket)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter.allocations import KubeletAllocationSource
from exporter.cycle import CollectionCycle
from exporter.kubelet.client import KubeletUnavailableError, PodResourcesClient, parse_list_response
from exporter.kubelet.device_ids import DeviceDirectory, parse_device_id, shared_base
from exporter.kubelet.dra import ResourceSliceDirectory
from exporter.kubelet.proto import api_pb2
from exporter.nvml.source import NvmlDeviceSource
from gpulens.core.device_model import SharingMode
from gpulens.core.kube_api import KubernetesClient
from tests.fakes.kubelet import FakeKubelet, container, dra_claim, pod
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.fakes.nvml import FakeNvml
from tests.fakes.nvml_captures import H100_NO_MIG, H200_MIG, load_capture

H200 = "GPU-22222222-0000-0000-0000-000000000002"
H100 = "GPU-33333333-0000-0000-0000-000000000003"


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[FakeKubelet]:
    with FakeKubelet(tmp_path) as k:
        yield k


@pytest.fixture
def nvml_source() -> Iterator[NvmlDeviceSource]:
    fake = FakeNvml([load_capture(H200_MIG, uuid=H200), load_capture(H100_NO_MIG, uuid=H100)])
    source = NvmlDeviceSource(fake, "node-a", watch_xids=False)
    source.read_devices(fake.now)
    yield source
    source.close()


def mig_uuids(source: NvmlDeviceSource) -> list[str]:
    return [u for u in source.directory.by_uuid if u.startswith("MIG-")]


def allocations_source(kubelet: FakeKubelet, source: NvmlDeviceSource, **kw: object) -> KubeletAllocationSource:
    return KubeletAllocationSource(PodResourcesClient(str(kubelet.socket), timeout_seconds=0.5),
                                   directory=lambda: source.directory, **kw)  # type: ignore[arg-type]


def test_device_plugin_whole_gpu_and_mig_mixed_strategy(kubelet: FakeKubelet, nvml_source: NvmlDeviceSource) -> None:
    migs = mig_uuids(nvml_source)
    kubelet.pods = [
        pod("team-a", "trainer", [container("main", "nvidia.com/gpu", [H100])]),
        pod("team-b", "small", [container("c", "nvidia.com/mig-1g.18gb", [migs[3]])]),
        pod("team-b", "big", [container("c", "nvidia.com/mig-3g.71gb", [migs[0]])]),
        pod("kube-system", "no-gpu", [container("c", "cpu", ["0"])]),
    ]
    got = {a.pod: a for a in allocations_source(kubelet, nvml_source).read_allocations(0.0)}
    assert set(got) == {"trainer", "small", "big"}
    assert got["trainer"].sharing_mode is SharingMode.EXCLUSIVE and got["trainer"].gpu_equivalents == 1.0
    assert got["small"].sharing_mode is SharingMode.MIG and got["small"].gpu_equivalents == pytest.approx(1 / 7)
    assert got["big"].gpu_equivalents == pytest.approx(1 / 7), "CI 0 of the split 3g GI holds 1 compute slice"
    assert got["trainer"].tenant == "team-a", "without a Kubernetes API the namespace is the tenant"


def test_mig_single_strategy_and_gke_ids_resolve_through_the_nvml_directory(
        kubelet: FakeKubelet, nvml_source: NvmlDeviceSource) -> None:
    migs = mig_uuids(nvml_source)
    kubelet.pods = [pod("ns", "single", [container("c", "nvidia.com/gpu", [migs[2]])]),
                    pod("ns", "gke", [container("c", "nvidia.com/gpu", ["nvidia0/gi3"])]),
                    pod("ns", "gke-whole", [container("c", "nvidia.com/gpu", ["nvidia1"])])]
    got = {a.pod: a for a in allocations_source(kubelet, nvml_source).read_allocations(0.0)}
    assert got["single"].device_id == migs[2] and got["single"].gpu_equivalents == pytest.approx(2 / 7)
    assert got["gke"].device_id == migs[2], "nvidia0/gi3 is GPU index 0, GPU instance 3"
    assert got["gke-whole"].device_id == H100


def test_time_slicing_replicas_share_the_gpu_by_advertised_replicas(
        kubelet: FakeKubelet, nvml_source: NvmlDeviceSource) -> None:
    kubelet.allocatable = [api_pb2.ContainerDevices(resource_name="nvidia.com/gpu",
                                                    device_ids=[f"{H100}::{i}" for i in range(4)])]
    kubelet.pods = [pod("a", "p1", [container("c", "nvidia.com/gpu", [f"{H100}::0"])]),
                    pod("b", "p2", [container("c", "nvidia.com/gpu", [f"{H100}::3"])])]
    source = allocations_source(kubelet, nvml_source)
    got = sorted(source.read_allocations(0.0), key=lambda a: a.pod)
    source.read_allocations(0.0)
    assert kubelet.allocatable_calls == 1, "advertised replicas are cached between cycles"
    assert [(a.device_id, a.replica, a.sharing_mode) for a in got] == [
        (H100, 0, SharingMode.TIME_SLICING), (H100, 3, SharingMode.TIME_SLICING)]
    assert [a.gpu_equivalents for a in got] == [0.25, 0.25]
    nvml_source.replicas = source.advertised_replicas
    gpu = next(g for g in nvml_source.read_devices(0.0).gpus if g.uuid == H100)
    assert (gpu.sharing_mode, gpu.replicas) == (SharingMode.TIME_SLICING, 4)


def test_dra_claims_resolve_to_uuids_through_resource_slices(
        kubelet: FakeKubelet, nvml_source: NvmlDeviceSource) -> None:
    migs = mig_uuids(nvml_source)
    with FakeKubernetesApi() as api:
        api.objects["/apis/resource.k8s.io/v1/resourceslices"] = {"items": [{
            "spec": {"driver": "gpu.nvidia.com", "nodeName": "node-a", "pool": {"name": "node-a"},
                     "devices": [
                         {"name": "gpu-1", "attributes": {"uuid": {"string": H100}, "type": {"string": "gpu"}}},
                         {"name": "gpu-0-mig-9-0", "attributes": {"uuid": {"string": migs[3]},
                                                                  "type": {"string": "mig"}}}]}}]}
        kubelet.pods = [pod("ml", "dra-whole", [container("c", claims=[dra_claim("gpu", "ml", "node-a", "gpu-1")])]),
                        pod("ml", "dra-mig", [container("c", claims=[
                            dra_claim("mig", "ml", "node-a", "gpu-0-mig-9-0"),
                            dra_claim("nic", "ml", "node-a", "eth0", driver="net.example.com")])])]
        slices = ResourceSliceDirectory(KubernetesClient(api.url), "node-a")
        source = allocations_source(kubelet, nvml_source, slices=slices)
        got = {a.pod: a for a in source.read_allocations(0.0)}
    assert got["dra-whole"].device_id == H100 and got["dra-whole"].gpu_equivalents == 1.0
    assert got["dra-mig"].device_id == migs[3] and got["dra-mig"].sharing_mode is SharingMode.MIG
    assert source.take_errors() == {}


def test_a_response_over_4_mib_is_received(kubelet: FakeKubelet) -> None:
    kubelet.pods = [pod(f"namespace-{i:05d}-" + "x" * 200, f"pod-{i:05d}-" + "y" * 200,
                        [container(f"c-{j}", "nvidia.com/gpu", [f"GPU-{i:08d}-{j:04d}"]) for j in range(8)])
                    for i in range(6000)]
    client = PodResourcesClient(str(kubelet.socket), timeout_seconds=10)
    response = client.list()
    assert response.ByteSize() > 4 * 1024 * 1024
    assert len(parse_list_response(response).devices) == 6000 * 8
    client.close()


def test_a_hanging_kubelet_times_out_and_the_cycle_keeps_serving_gpus(
        kubelet: FakeKubelet, nvml_source: NvmlDeviceSource) -> None:
    kubelet.hang_seconds = 5.0
    kubelet.pods = [pod("a", "p", [container("c", "nvidia.com/gpu", [H100])])]
    allocations = allocations_source(kubelet, nvml_source)
    with pytest.raises(KubeletUnavailableError, match="DEADLINE_EXCEEDED"):
        allocations.read_allocations(0.0)
    cycle = CollectionCycle(nvml_source, allocations, node="node-a")
    state = cycle.run_once()
    assert state.errors_total["kubelet"] == 1
    assert state.snapshot is not None and len(state.snapshot.gpus) == 2 and state.snapshot.allocations == ()


def test_no_socket_is_a_clear_error_and_device_metrics_keep_flowing(
        tmp_path: Path, nvml_source: NvmlDeviceSource) -> None:
    client = PodResourcesClient(f"unix://{tmp_path}/missing.sock")
    with pytest.raises(KubeletUnavailableError, match="does not exist"):
        client.list()
    cycle = CollectionCycle(nvml_source, KubeletAllocationSource(client), node="node-a")
    cycle.run_once()
    state = cycle.run_once()
    assert state.errors_total["kubelet"] == 2 and state.snapshot is not None
    assert len(state.snapshot.gpus) == 2 and state.last_error is None


def test_device_id_shapes() -> None:
    assert parse_device_id("GPU-abc::3").uuid == "GPU-abc" and parse_device_id("GPU-abc::3").replica == 3
    assert parse_device_id("MIG-def").uuid == "MIG-def"
    gke = parse_device_id("nvidia2/gi5/vgpu1")
    assert (gke.index, gke.gpu_instance_id, gke.replica) == (2, 5, 1)
    old = parse_device_id("MIG-GPU-1234abcd/7/0")
    assert (old.parent_uuid, old.gpu_instance_id, old.compute_instance_id) == ("GPU-1234abcd", 7, 0)
    assert DeviceDirectory().resolve(parse_device_id("nvidia9")) is None
    assert [shared_base(i) for i in ("GPU-a::2", "nvidia0/gi1/vgpu3", "nvidia1", "MIG-b")] == [
        "GPU-a", "nvidia0/gi1", "nvidia1", "MIG-b"]


# -- DRA 1.36: shared devices (consumed capacity, shareID) and partitions (shared counters, MIG created on demand)

DRIVER = "gpu.nvidia.com"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def _claim(name: str, device: str, consumed: dict[str, str] | None = None, share_id: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": device}
    if consumed:
        result["consumedCapacity"] = consumed
    if share_id:
        result["shareID"] = share_id
    return {"metadata": {"namespace": "ml", "name": name}, "status": {"allocation": {"devices": {"results": [result]}}}}


def _read(tmp_path: Path, api: FakeKubernetesApi, nvml_source: NvmlDeviceSource,
          claims: list[tuple[str, str]]) -> dict[str, tuple[str, SharingMode, float]]:
    with FakeKubelet(tmp_path) as kubelet:
        kubelet.pods = [pod("ml", claim, [container("c", claims=[dra_claim(claim, "ml", "node-a", device)])])
                        for claim, device in claims]
        source = KubeletAllocationSource(PodResourcesClient(str(kubelet.socket)), directory=lambda: nvml_source.directory,
                                         slices=ResourceSliceDirectory(KubernetesClient(api.url), "node-a"))
        got = {a.pod: (a.device_id, a.sharing_mode, round(a.gpu_equivalents, 6)) for a in source.read_allocations(0.0)}
        assert source.take_errors() == {}
    return got


def test_claims_sharing_one_device_hold_the_part_of_its_capacity_they_consume(
        tmp_path: Path, nvml_source: NvmlDeviceSource) -> None:
    with FakeKubernetesApi() as api:
        api.objects[SLICES] = {"items": [{"spec": {"driver": DRIVER, "nodeName": "node-a", "pool": {"name": "node-a"},
            "devices": [{"name": "gpu-1", "allowMultipleAllocations": True,
                         "attributes": {"uuid": {"string": H100}, "type": {"string": "gpu"}},
                         "capacity": {"memory": {"value": "80Gi"}, "multiprocessors": {"value": "132"}}}]}}]}
        api.objects["/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/small"] = _claim(
            "small", "gpu-1", {"memory": "20Gi"}, "a1")
        api.objects["/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/large"] = _claim(
            "large", "gpu-1", {"memory": "40Gi", "multiprocessors": "33"}, "b2")
        got = _read(tmp_path, api, nvml_source, [("small", "gpu-1"), ("large", "gpu-1")])
    # 20 of 80 GiB; 40 of 80 GiB is more than 33 of 132 multiprocessors: half the GPU stays free between them
    assert got == {"small": (H100, SharingMode.TIME_SLICING, 0.25), "large": (H100, SharingMode.TIME_SLICING, 0.5)}


def test_a_mig_instance_the_driver_created_on_demand_is_attributed_like_a_static_one(
        tmp_path: Path, nvml_source: NvmlDeviceSource) -> None:
    created = next(u for u, d in nvml_source.directory.by_uuid.items() if d.profile == "2g.35gb")
    counters = {"name": "gpu-0-counters", "counters": {"multiprocessors": {"value": "132"}, "memory": {"value": "140Gi"}}}

    def partition(name: str, profile: str, sms: str, memory: str) -> dict[str, Any]:
        return {"name": name, "attributes": {"type": {"string": "mig"}, "parentUUID": {"string": H200},
                                             "profile": {"string": profile}},
                "consumesCounters": [{"counterSet": "gpu-0-counters",
                                      "counters": {"multiprocessors": {"value": sms}, "memory": {"value": memory}}}]}

    with FakeKubernetesApi() as api:
        api.objects[SLICES] = {"items": [
            {"spec": {"driver": DRIVER, "nodeName": "node-a", "pool": {"name": "node-a"}, "sharedCounters": [counters]}},
            {"spec": {"driver": DRIVER, "nodeName": "node-a", "pool": {"name": "node-a"}, "devices": [
                partition("gpu-0-mig-2g", "2g.35gb", "32", "35Gi"),
                partition("gpu-0-mig-4g", "4g.71gb", "66", "70Gi")]}}]}
        for name, device in (("two", "gpu-0-mig-2g"), ("four", "gpu-0-mig-4g")):
            api.objects[f"/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/{name}"] = _claim(name, device)
        got = _read(tmp_path, api, nvml_source, [("two", "gpu-0-mig-2g"), ("four", "gpu-0-mig-4g")])
    # NVML lists the created 2g.35gb: its own UUID and 2/7; the 4g.71gb is not listed yet: its parent GPU with the
    # part of the GPU's counters the partition consumes (66 of 132 multiprocessors, 70 of 140 GiB)
    assert got == {"two": (created, SharingMode.MIG, round(2 / 7, 6)), "four": (H200, SharingMode.MIG, 0.5)}
