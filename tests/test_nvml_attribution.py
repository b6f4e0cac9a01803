"""Per-process attribution on shared GPUs: PID -> pod UID from /proc/<pid>/cgroup (injectable root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.attribution import PidPodResolver, pod_uid_from_cgroup
from exporter.exposition import pod_sm_shares
from exporter.nvml.source import NvmlDeviceSource
from tests.fakes.nvml import FakeNvml
from tests.fakes.nvml_captures import H100_NO_MIG, load_capture

UID_A = "1f6a2b3c-4d5e-4f60-8a7b-9c0d1e2f3a4b"
UID_B = "0a1b2c3d-4e5f-4061-8273-94a5b6c7d8e9"


def write_cgroup(root: Path, pid: int, text: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(text)


def test_cgroupfs_and_systemd_layouts_both_name_the_pod() -> None:
    cgroupfs = f"0::/kubepods/burstable/pod{UID_A}/0123abcd\n"
    systemd = ("0::/kubepods.slice/kubepods-besteffort.slice/"
               f"kubepods-besteffort-pod{UID_B.replace('-', '_')}.slice/cri-containerd-0a.scope\n")
    assert pod_uid_from_cgroup(cgroupfs) == UID_A
    assert pod_uid_from_cgroup(systemd) == UID_B
    assert pod_uid_from_cgroup("0::/user.slice/session-3.scope\n") is None


def test_pids_the_exporter_cannot_see_stay_unattributed(tmp_path: Path) -> None:
    resolver = PidPodResolver(tmp_path)
    assert resolver.pod_uid(4242) is None


def test_time_sliced_gpu_processes_are_attributed_and_split_by_their_sm_utilization(tmp_path: Path) -> None:
    gpu = load_capture(H100_NO_MIG, uuid="GPU-44444444-0000-0000-0000-000000000004")
    gpu.processes[0].sm_percent = 60
    fake = FakeNvml([gpu])
    pids = [p.pid for p in gpu.processes]
    write_cgroup(tmp_path, pids[0], f"0::/kubepods/pod{UID_A}/c1\n")
    for pid in pids[1:]:
        write_cgroup(tmp_path, pid, f"0::/kubepods/pod{UID_B}/c2\n")
    source = NvmlDeviceSource(fake, "n", watch_xids=False, attribute_processes=True, proc_root=tmp_path)
    readings = source.read_devices(fake.now)
    by_pid = {p.pid: p for p in readings.processes}
    assert by_pid[pids[0]].pod_uid == UID_A and by_pid[pids[0]].sm_utilization_ratio == pytest.approx(0.6)
    shares = pod_sm_shares(readings.processes)  # what splits the shared GPU's activity between its pods
    assert shares[(gpu.uuid, UID_A)] == pytest.approx(0.6)


def test_attribution_is_off_by_default() -> None:
    fake = FakeNvml([load_capture(H100_NO_MIG)])
    readings = NvmlDeviceSource(fake, "n", watch_xids=False).read_devices(fake.now)
    assert readings.processes and all(p.pod_uid is None for p in readings.processes)

