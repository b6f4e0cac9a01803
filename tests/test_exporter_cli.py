"""`gpulens exporter` as a user runs it: the real CLI in a subprocess."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ROOT, assert_one_line_error, gpulens
from tests.support.exporter import http_get, running_exporter_process


def test_a_bad_scenario_file_gives_one_line_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("pools: [ {gpu_model: H999, nodes: 1} ]\ntenants: []\n")
    assert_one_line_error(gpulens("exporter", "--scenario", str(bad)), "broken.yaml")


def test_a_missing_scenario_file_gives_one_line(tmp_path: Path) -> None:
    assert_one_line_error(gpulens("exporter", "--scenario", str(tmp_path / "nope.yaml")), "nope.yaml")


@pytest.mark.parametrize(
    ("flag", "what"),
    [("--scenario", "scenario "), ("--basic-auth-file", "basic-auth file "), ("--tenancy-config", "")],
)
def test_a_binary_file_where_text_belongs_gives_one_line(tmp_path: Path, flag: str, what: str) -> None:
    binary = tmp_path / "config.yaml"
    binary.write_bytes(b"\xff\xfe\x00rules")
    backend = ["--backend", "nvml"] if flag == "--tenancy-config" else []  # read before NVML is opened
    assert_one_line_error(gpulens("exporter", *backend, flag, str(binary)),
                          f"cannot read {what}{binary}: not UTF-8 text")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--bogus"], "--bogus"),
        (["--backend", "gpu"], "backend"),
        (["--interval", "soon"], "interval"),
        (["--listen", "nowhere"], "listen"),
        (["--max-concurrent-requests", "many"], "--max-concurrent-requests"),
        (["--tls-cert-file", "/tmp/c.pem"], "--tls-key-file"),
        (["--node", "no-such-node"], "no-such-node"),
        (["--backend", "nvml", "--list-nodes"], "--list-nodes"),
    ],
)
def test_bad_flags_give_one_line_and_a_non_zero_exit(args: list[str], fragment: str) -> None:
    assert_one_line_error(gpulens("exporter", *args), fragment)


def test_auto_backend_never_falls_back_to_the_simulator() -> None:
    proc = gpulens("exporter", "--backend", "auto", "--listen", "127.0.0.1:0", timeout=120)
    assert_one_line_error(proc, "NVML")
    assert proc.stdout == ""


def test_a_busy_port_gives_one_line() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert_one_line_error(gpulens("exporter", "--listen", f"127.0.0.1:{port}"), f"127.0.0.1:{port}")


def test_list_nodes_prints_the_scenario_nodes_default_first() -> None:
    proc = gpulens("exporter", "--list-nodes")
    assert proc.returncode == 0, proc.stderr
    nodes = proc.stdout.split()
    assert len(nodes) >= 2 and "h200" in nodes[0]


def test_help_explains_the_backends_and_every_setting() -> None:
    proc = subprocess.run([sys.executable, "-m", "gpulens.cli", "exporter", "--help"], cwd=ROOT,
                          capture_output=True, text=True, check=False, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0
    for flag in ("--backend", "--listen", "--scenario", "--node", "--list-nodes", "--interval", "--kubelet-socket",
                 "--kubelet-timeout", "--tenancy-config", "--otlp-endpoint", "--otlp-protocol", "--tls-cert-file",
                 "--tls-key-file", "--basic-auth-file", "--max-concurrent-requests", "--attribute-processes",
                 "--health-max-age", "--log-level"):
        assert flag in proc.stdout
    assert "never falls back to the simulator" in proc.stdout


def test_the_sim_exporter_serves_mig_and_tenant_series_and_stops_cleanly_on_sigterm() -> None:
    with running_exporter_process("--backend", "sim", "--interval", "1s") as (proc, url):
        status, _, body = http_get(url + "/metrics")
        text = body.decode()
        assert status == 200
        assert re.search(r'gpulens_device_gpu_equivalents\{[^}]*gpu_instance="\d+"[^}]*profile="1g\.18gb"', text)
        assert re.search(r'gpulens_allocation_gpu_equivalents\{[^}]*tenant="[^"]+"', text)
        assert 'gpulens_exporter_build_info{backend="sim"' in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
