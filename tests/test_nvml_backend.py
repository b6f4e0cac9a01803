"""open_nvml_backend: wiring NVML, kubelet and tenancy; clear errors when NVML cannot load."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from exporter.backends import open_nvml_backend
from exporter.settings import Backend, ExporterSettings
from gpulens.core.errors import UserError
from gpulens.core.kube_api import KubernetesClient
from tests.fakes.kubelet import FakeKubelet, container, pod
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.fakes.nvml import FakeNvml
from tests.fakes.nvml_captures import H200_MIG, load_capture


def test_no_driver_is_one_clear_user_error() -> None:
    fake = FakeNvml([])
    fake.driver_loaded = False
    with pytest.raises(UserError, match="NVML cannot load .*Driver Not Loaded.*--backend sim"):
        open_nvml_backend(ExporterSettings(backend=Backend.NVML, node="n"), nvml=fake)


def test_a_bad_tenancy_file_fails_before_touching_nvml(tmp_path: Path) -> None:
    bad = tmp_path / "t.yaml"
    bad.write_text("rules: 3\n")
    fake = FakeNvml([])
    with pytest.raises(UserError, match="t.yaml"):
        open_nvml_backend(ExporterSettings(backend=Backend.NVML, tenancy_config=bad), nvml=fake)
    assert fake.init_calls == 0


def test_the_backend_joins_nvml_devices_kubelet_pods_and_tenants(tmp_path: Path) -> None:
    fake = FakeNvml([load_capture(H200_MIG)])
    mig = fake.gpus[0].migs[2].uuid
    with FakeKubelet(tmp_path) as kubelet, FakeKubernetesApi() as api:
        api.add_pod("vision", "infer-0", "node-a", labels={"gpulens.io/tenant": "vision-team"})
        kubelet.pods = [pod("vision", "infer-0", [container("c", "nvidia.com/mig-2g.35gb", [mig])])]
        settings = ExporterSettings(backend=Backend.NVML, node="node-a", kubelet_socket=f"unix://{kubelet.socket}")
        devices, allocations = open_nvml_backend(settings, nvml=fake, kube_api=KubernetesClient(api.url))
        try:
            readings = devices.read_devices(fake.now)
            (allocation,) = allocations.read_allocations(fake.now)
        finally:
            devices.close()
            allocations.close()
    assert len(readings.gpus[0].mig_instances) == 5
    assert (allocation.device_id, allocation.tenant) == (mig, "vision-team")
    assert allocation.gpu_equivalents == pytest.approx(2 / 7)


def test_the_cli_on_a_machine_without_nvidia_driver_prints_one_line() -> None:
    pynvml_loads = subprocess.run([sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"],
                                  capture_output=True, timeout=60).returncode == 0
    if pynvml_loads:
        pytest.skip("this machine has a working NVIDIA driver")
    result = subprocess.run([sys.executable, "-m", "gpulens.cli", "exporter", "--backend", "nvml"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and result.stderr.startswith("gpulens: error: NVML cannot load")
