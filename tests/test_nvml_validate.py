"""The hardware check prints every reading and per-call latency, and never calls a setter."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from exporter.nvml.validate import run_validation
from tests.fakes.nvml import FakeNvml
from tests.fakes.nvml_captures import H100_NO_MIG, H200_MIG, load_capture

ROOT = Path(__file__).resolve().parent.parent


def test_the_check_prints_readings_mig_layout_and_latency_of_each_call() -> None:
    fake = FakeNvml([load_capture(H200_MIG, uuid="GPU-aaaaaaaa-0000-0000-0000-000000000001"),
                     load_capture(H100_NO_MIG, uuid="GPU-bbbbbbbb-0000-0000-0000-000000000002")])
    out = io.StringIO()

    def sleep(seconds: float) -> None:
        fake.advance(seconds)

    run_validation(fake, out, cycles=2, interval=1.0, xid_wait=0.0, sleep=sleep, clock=lambda: fake.now)
    text = out.getvalue()
    assert "GPU 0 NVIDIA H200" in text and "profile=3g.71gb" in text and "gi=9 ci=0" in text
    assert "temperature: 36.0 C  power: 295.0 W" in text, "the H200 capture under load"
    assert "retired pages: absent" in text, "N/A on Hopper stays absent, never 0"
    assert "nvmlDeviceGetMemoryInfo" in text and "mean ms" in text
    assert "functions missing in this driver: none" in text
    setters = [name for name, _ in fake.calls if name.startswith(("nvmlDeviceSet", "nvmlGpmSet", "nvmlGpuInstance"))
               or "Reset" in name or "Clear" in name]
    assert setters == [], "the check is read-only"


def test_the_script_explains_itself_and_fails_cleanly_without_a_driver() -> None:
    help_text = subprocess.run([sys.executable, str(ROOT / "scripts" / "validate-nvml"), "--help"],
                               capture_output=True, text=True, timeout=60)
    assert help_text.returncode == 0
    assert "read-only" in help_text.stdout and "--cycles" in help_text.stdout
    if subprocess.run([sys.executable, "-c", "import pynvml; pynvml.nvmlInit()"], capture_output=True,
                      timeout=60).returncode == 0:
        return  # a real GPU here: the check would run for real
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "validate-nvml"), "--cycles", "1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.startswith("validate-nvml: error: NVML cannot load")
