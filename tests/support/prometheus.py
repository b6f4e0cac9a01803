"""Run the real ``prometheus`` and ``promtool`` binaries from tests.

A missing binary skips the test with a loud reason, except under ``CI=true`` where it fails: CI must
run the integration tests, not silently skip them.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml


def in_ci() -> bool:
    """True when the environment says we run in CI (``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def require_binary(name: str, debian_package: str = "prometheus") -> str:
    """Path of executable ``name``; skip loudly when it is missing, or fail when ``CI=true``."""
    path = shutil.which(name)
    if path is not None:
        return path
    missing(
        f"'{name}' binary not found on PATH: install it (Debian: apt-get install {debian_package}; "
        "scripts/dev test does it when root) to run this test"
    )


def missing(reason: str) -> NoReturn:
    """Skip the test loudly for ``reason``, or fail it when ``CI=true``: CI must run it."""
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(f"SKIPPED LOUDLY: {reason}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def promtool(*args: str, stdin: str | None = None, timeout: float = 60.0) -> tuple[int, str]:
    """Run ``promtool args...``; return (exit code, stdout+stderr)."""
    exe = require_binary("promtool")
    proc = subprocess.run(
        [exe, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback test URL
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def scrape_config(
    scrape_targets: Sequence[str],
    *,
    job: str = "gpulens",
    scrape_interval: str = "1s",
    extra_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A minimal Prometheus configuration scraping ``host:port`` targets every ``scrape_interval``."""
    config: dict[str, Any] = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
        "scrape_configs": [],
    }
    if scrape_targets:
        config["scrape_configs"].append(
            {
                "job_name": job,
                "scrape_interval": scrape_interval,
                "scrape_timeout": scrape_interval,
                "static_configs": [{"targets": list(scrape_targets)}],
            }
        )
    if extra_config:
        config.update(extra_config)
    return config


class PrometheusServer:
    """A running Prometheus: its base URL and a small query helper."""

    def __init__(self, url: str, process: subprocess.Popen[bytes], data_dir: Path, log_path: Path) -> None:
        self.url = url
        self.process = process
        self.data_dir = data_dir
        self.log_path = log_path

    def __str__(self) -> str:
        return self.url

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>`` and return the ``data`` of a successful answer."""
        query = urllib.parse.urlencode(params)
        status, body = _http_get(f"{self.url}/api/v1/{path}?{query}", timeout=10.0)
        payload = json.loads(body)
        if status != 200 or payload.get("status") != "success":
            raise AssertionError(f"Prometheus API {path} failed ({status}): {body[:500]!r}")
        return payload["data"]

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query; returns the result vector."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        return list(data["result"])

    def wait_for_targets_up(self, count: int, timeout: float = 30.0) -> None:
        """Wait until ``count`` active targets report health ``up``."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            last = self.api("targets")["activeTargets"]
            if sum(1 for t in last if t.get("health") == "up") >= count:
                return
            time.sleep(0.2)
        raise AssertionError(f"Prometheus targets not up after {timeout}s: {last}")

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


@contextmanager
def running_prometheus(
    scrape_targets: Sequence[str] = (),
    *,
    data_dir: Path,
    extra_args: Sequence[str] = (),
    storage_path: Path | None = None,
    config: dict[str, Any] | None = None,
    rule_files: Sequence[Path] = (),
    scrape_interval: str = "1s",
    startup_timeout: float = 30.0,
) -> Iterator[PrometheusServer]:
    """Start the real ``prometheus`` on a free loopback port; yield it (``.url``); stop it on exit.

    ``config`` replaces the generated scrape configuration entirely; ``rule_files`` are added to it.
    ``storage_path`` defaults to ``data_dir/tsdb``.
    """
    exe = require_binary("prometheus")
    data_dir.mkdir(parents=True, exist_ok=True)
    cfg = dict(config) if config is not None else scrape_config(scrape_targets, scrape_interval=scrape_interval)
    if rule_files:
        cfg["rule_files"] = [str(p) for p in rule_files]
    config_path = data_dir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    storage = storage_path if storage_path is not None else data_dir / "tsdb"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = data_dir / "prometheus.log"
    args = [
        exe,
        f"--config.file={config_path}",
        f"--storage.tsdb.path={storage}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
        *extra_args,
    ]
    with ready_process("prometheus", args, url, log_path, startup_timeout) as proc:
        yield PrometheusServer(url, proc, data_dir, log_path)


@contextmanager
def serving_openmetrics(text: str, work_dir: Path) -> Iterator[PrometheusServer]:
    """A real Prometheus serving exactly the samples of the OpenMetrics ``text`` (blocks built by promtool;
    lookback 30s, so a series ends where its samples do)."""
    source = work_dir / "samples.om"
    source.write_text(text, encoding="utf-8")
    code, output = promtool("tsdb", "create-blocks-from", "openmetrics", str(source), str(work_dir / "tsdb"),
                            timeout=120)
    assert code == 0, output
    args = ["--query.lookback-delta=30s", "--storage.tsdb.retention.time=100y"]
    with running_prometheus(data_dir=work_dir / "prom", storage_path=work_dir / "tsdb", extra_args=args) as prom:
        yield prom


@contextmanager
def ready_process(
    name: str, args: Sequence[str], url: str, log_path: Path, startup_timeout: float,
) -> Iterator[subprocess.Popen[bytes]]:
    """Start ``args`` (a Prometheus-family server logging to ``log_path``), wait until ``url/-/ready`` answers 200,
    yield the process, and stop it on exit (terminate, then kill)."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT)  # noqa: S603 - a test binary
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if _http_get(f"{url}/-/ready", timeout=1.0)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} not ready after {startup_timeout}s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
