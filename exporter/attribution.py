"""Per-process attribution on shared GPUs: which pod a GPU process belongs to, from its cgroup.

NVML reports host PIDs; ``/proc/<pid>/cgroup`` of such a PID names the pod's cgroup
(``.../kubepods/burstable/pod<uid>/<container>`` with cgroupfs, ``kubepods-burstable-pod<uid_with_underscores>.slice``
with systemd). This only works when the exporter sees the host's PIDs (``hostPID: true``): off by default,
see docs/real-nodes.md for the trade-off. The ``/proc`` root is injectable for tests.
"""

from __future__ import annotations

import re
from pathlib import Path

_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})", re.IGNORECASE
)


def pod_uid_from_cgroup(text: str) -> str | None:
    """The pod UID named in the content of a ``/proc/<pid>/cgroup`` file, or ``None``."""
    for line in text.splitlines():
        match = _POD_UID.search(line)
        if match:
            return match.group(1).replace("_", "-").lower()
    return None


class PidPodResolver:
    """PID -> pod UID through ``<proc_root>/<pid>/cgroup``, cached per PID (PIDs of dead processes dropped)."""

    def __init__(self, proc_root: Path = Path("/proc"), max_entries: int = 4096) -> None:
        self._root = proc_root
        self._cache: dict[int, str | None] = {}
        self._max = max_entries

    def pod_uid(self, pid: int) -> str | None:
        if pid in self._cache:
            return self._cache[pid]
        try:
            text = (self._root / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None  # not visible (no hostPID) or already gone: do not cache
        uid = pod_uid_from_cgroup(text)
        if len(self._cache) >= self._max:
            self._cache.clear()
        self._cache[pid] = uid
        return uid

