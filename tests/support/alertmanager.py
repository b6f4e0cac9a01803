"""Run the real Alertmanager (Debian's ``prometheus-alertmanager``) from tests and benchmarks.

A missing binary skips loudly, or fails under ``CI=true`` (as :mod:`tests.support.prometheus` does).
Clustering is off (``--cluster.listen-address=``): one instance, no gossip port.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.support.prometheus import free_port, missing, ready_process

BINARIES = ("prometheus-alertmanager", "alertmanager")


def alertmanager_binary() -> str:
    for name in BINARIES:
        path = shutil.which(name)
        if path is not None:
            return path
    missing("'prometheus-alertmanager' binary not found on PATH: install it (Debian: apt-get install "
            "prometheus-alertmanager; scripts/dev test does it when root) to run this test")


def webhook_config(url: str, *, group_wait: str, group_interval: str, repeat_interval: str = "1h") -> dict[str, Any]:
    """Every alert to one webhook receiver, grouped by alert and node, resolved alerts sent too."""
    return {
        "route": {"receiver": "gpulens-remediation", "group_by": ["alertname", "node"], "group_wait": group_wait,
                  "group_interval": group_interval, "repeat_interval": repeat_interval},
        "receivers": [{"name": "gpulens-remediation",
                       "webhook_configs": [{"url": url, "send_resolved": True, "max_alerts": 0}]}],
    }


@contextmanager
def running_alertmanager(config: dict[str, Any], data_dir: Path, startup_timeout: float = 30.0) -> Iterator[str]:
    """Start Alertmanager with ``config`` on a free loopback port; yield its URL; stop it on exit."""
    exe = alertmanager_binary()
    data_dir.mkdir(parents=True, exist_ok=True)
    config_path = data_dir / "alertmanager.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = data_dir / "alertmanager.log"
    args = [exe, f"--config.file={config_path}", f"--storage.path={data_dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="]
    with ready_process("alertmanager", args, url, log_path, startup_timeout):
        yield url
