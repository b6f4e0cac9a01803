"""Our own cost per collection cycle on a real-node backend, with baselines measured in the same run.

* NVML cycle: ``NvmlDeviceSource.read_devices`` on FakeNvml with 8 H200 GPUs x 7 MIG instances (1g.18gb,
  GPM on), vs replaying the exact NVML calls that cycle made straight against the fake (the floor: what
  the calls themselves cost, so the ratio is our funnel + model-building overhead).
* Allocation cycle: ``KubeletAllocationSource.read_allocations`` for 60 GPU pods over real gRPC on a unix
  socket (FakeKubelet) with tenants from a warm cache, vs the bare ``List`` RPC on the same channel.
* PodResources parsing for 500 pods: decode + ``parse_list_response`` vs protobuf decode alone.
* Channel reuse: ``List`` on our reused channel vs a new channel per call (what dcgm-exporter does).

Run: ``.venv/bin/python benchmarks/bench_nvml_kubelet.py [--cycles 200]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc  # noqa: E402

from exporter.allocations import KubeletAllocationSource  # noqa: E402
from exporter.kubelet.client import PodResourcesClient, parse_list_response  # noqa: E402
from exporter.kubelet.proto import api_pb2, api_pb2_grpc  # noqa: E402
from exporter.nvml.source import NvmlDeviceSource  # noqa: E402
from gpulens.core.kube_api import KubernetesClient  # noqa: E402
from gpulens.core.tenancy.resolver import TenantResolver  # noqa: E402
from tests.fakes.kubelet import FakeKubelet, container, pod  # noqa: E402
from tests.fakes.kubernetes_api import FakeKubernetesApi  # noqa: E402
from tests.fakes.nvml import FakeMig, FakeNvml  # noqa: E402
from tests.fakes.nvml_captures import H200_MIG, load_capture  # noqa: E402

NODE = "bench-node"


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def paired(a: Callable[[], object], b: Callable[[], object], repeat: int) -> tuple[list[float], list[float]]:
    """Time ``a`` and ``b`` alternately, so both see the same machine load."""
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(repeat):
        ta.extend(timed(a, 1))
        tb.extend(timed(b, 1))
    return ta, tb


def fmt(samples: list[float]) -> str:
    return f"{1000 * statistics.median(samples):8.3f} ms (p90 {1000 * sorted(samples)[int(0.9 * len(samples))]:.3f})"


def eight_h200_with_seven_migs() -> FakeNvml:
    base = load_capture(H200_MIG)
    gpus = []
    for g in range(8):
        uuid = f"GPU-{g:08d}-0000-0000-0000-000000000000"
        migs = [FakeMig(f"MIG-{g:04d}{i:04d}-0000-0000-0000-000000000000", 7 + i, 0, "1g.18gb", 16384, 9 + i,
                        activity=0.1 * i) for i in range(7)]
        gpus.append(replace(base, uuid=uuid, migs=migs, processes=[]))
    return FakeNvml(gpus)


def bench_nvml(cycles: int) -> tuple[list[float], list[float], int, NvmlDeviceSource, FakeNvml]:
    fake = eight_h200_with_seven_migs()
    source = NvmlDeviceSource(fake, NODE, watch_xids=False)
    for _ in range(3):  # warm up: GPM sample pairs exist
        fake.advance(1.0)
        source.read_devices(fake.now)
    fake.calls.clear()
    fake.advance(1.0)
    source.read_devices(fake.now)
    recorded = list(fake.calls)

    def ours() -> None:
        fake.advance(1.0)
        source.read_devices(fake.now)
        fake.calls.clear()

    def replay() -> None:
        fake.advance(1.0)
        for name, args in recorded:
            try:
                result = getattr(fake, name)(*args)  # through the same call-recording wrapper as ours
            except fake.NVMLError:
                continue
            if name == "nvmlGpmSampleAlloc":
                fake.nvmlGpmSampleFree(result)
        fake.calls.clear()
    ours_t, replay_t = paired(ours, replay, cycles)
    return ours_t, replay_t, len(recorded), source, fake


def pods_response(n: int, gpus_per_pod: int = 1) -> api_pb2.ListPodResourcesResponse:
    pods = []
    for i in range(n):
        ids = [f"MIG-{i:04d}{j:04d}-0000-0000-0000-000000000000" for j in range(gpus_per_pod)]
        pods.append(pod(f"team-{i % 12}", f"worker-{i:05d}", [
            container("main", "nvidia.com/gpu", ids),
            container("sidecar", "example.com/nic", [f"nic{i}"]),
        ]))
    return api_pb2.ListPodResourcesResponse(pod_resources=pods)


def walk(response: api_pb2.ListPodResourcesResponse) -> int:
    """Touch every field ``parse_list_response`` reads (upb decodes lazily: this is the real floor)."""
    seen = 0
    for p in response.pod_resources:
        _ = (p.namespace, p.name)
        for c in p.containers:
            _ = c.name
            for d in c.devices:
                _ = d.resource_name
                seen += len(list(d.device_ids))
            for dr in c.dynamic_resources:
                seen += len(dr.claim_resources)
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=200)
    args = parser.parse_args()
    n = args.cycles
    print(f"python {sys.version.split()[0]}, {n} repetitions each, median (p90)\n")

    ours_t, replay_t, calls, source, fake = bench_nvml(n)
    print("NVML cycle, 8 GPUs x 7 MIG instances (56 devices), GPM on")
    print(f"  gpulens read_devices         {fmt(ours_t)}   {calls} NVML calls per cycle")
    print(f"  baseline: same calls replayed {fmt(replay_t)}")
    print(f"  ratio (ours / calls alone)    {statistics.median(ours_t) / statistics.median(replay_t):.2f}x\n")

    with tempfile.TemporaryDirectory() as tmp, FakeKubelet(Path(tmp)) as kubelet, FakeKubernetesApi() as api:
        directory_source = source
        migs = [m.uuid for g in fake.gpus for m in g.migs]
        kubelet.pods = [pod(f"team-{i % 12}", f"worker-{i:03d}", [
            container("main", "nvidia.com/mig-1g.18gb", [migs[i % len(migs)]])]) for i in range(60)]
        for p in kubelet.pods:
            api.add_pod(p.namespace, p.name, NODE, labels={"gpulens.io/tenant": p.namespace})
        client = PodResourcesClient(str(kubelet.socket))
        allocations = KubeletAllocationSource(client, directory=lambda: directory_source.directory,
                                              tenants=TenantResolver(KubernetesClient(api.url), NODE))
        allocations.read_allocations(0.0)  # warm the tenant cache
        alloc_t, list_t = paired(lambda: allocations.read_allocations(0.0), client.list, n)
        print("Allocation cycle, 60 GPU pods over gRPC (unix socket), tenants cached")
        print(f"  gpulens read_allocations     {fmt(alloc_t)}")
        print(f"  baseline: bare List RPC      {fmt(list_t)}")
        print(f"  ratio                        {statistics.median(alloc_t) / statistics.median(list_t):.2f}x\n")

        def fresh_channel_list() -> None:
            with grpc.insecure_channel(f"unix://{kubelet.socket}") as channel:
                api_pb2_grpc.PodResourcesListerStub(channel).List(api_pb2.ListPodResourcesRequest(), timeout=5)
        reused_t, fresh_t = paired(client.list, fresh_channel_list, max(n // 4, 10))
        print("List RPC: reused channel (gpulens) vs a new channel per call")
        print(f"  reused                       {fmt(reused_t)}")
        print(f"  new channel each call        {fmt(fresh_t)}")
        print(f"  ratio (new / reused)         {statistics.median(fresh_t) / statistics.median(reused_t):.2f}x\n")
        client.close()

    payload = pods_response(500).SerializeToString()
    parse_t, walk_t = paired(lambda: parse_list_response(api_pb2.ListPodResourcesResponse.FromString(payload)),
                             lambda: walk(api_pb2.ListPodResourcesResponse.FromString(payload)), n)
    decode_t = timed(lambda: api_pb2.ListPodResourcesResponse.FromString(payload), n)
    print(f"PodResources parsing, 500 pods x 2 containers ({len(payload) / 1024:.0f} KiB)")
    print(f"  gpulens decode + parse       {fmt(parse_t)}")
    print(f"  baseline: decode + walk      {fmt(walk_t)}")
    print(f"  (lazy decode alone           {fmt(decode_t)})")
    print(f"  ratio (ours / decode + walk) {statistics.median(parse_t) / statistics.median(walk_t):.2f}x")
    source.close()


if __name__ == "__main__":
    main()
