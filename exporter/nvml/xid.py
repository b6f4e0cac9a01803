"""XID events from NVML on a background thread: a count per code and the last time each code was seen.

Events are registered on parent (physical) GPU handles only; MIG handles cannot register. Waits use a
timeout so the thread stops promptly; ``Timeout`` is the normal "nothing happened". Any other failure
drops the event set and rebuilds it after a backoff, so a flaky GPU never stops the exporter.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from exporter.nvml.funnel import TIMEOUT, GpuLifecycleError, NvmlFunnel, nvml_error_code
from gpulens.core.device_model import XidEvent

log = logging.getLogger(__name__)

NO_INSTANCE = 0xFFFFFFFF
"""GPU/compute-instance id NVML puts in event data when the event is not tied to an instance."""


class EventsUnavailable(RuntimeError):
    """The driver has no event API (or refuses it): XIDs are not watched."""


class XidWatcher:
    """Counts XID events per GPU and code; :meth:`run` loops until :meth:`stop`."""

    def __init__(
        self,
        funnel: NvmlFunnel,
        handles: Callable[[], Mapping[str, Any]],
        *,
        clock: Callable[[], float] = time.time,
        wait_ms: int = 1000,
        max_backoff: float = 30.0,
        on_event: Callable[[XidEvent], None] | None = None,
    ) -> None:
        self._funnel = funnel
        self._handles = handles
        self._clock = clock
        self._wait_ms = wait_ms
        self._max_backoff = max_backoff
        self._on_event = on_event
        self._lock = threading.Lock()
        self._counts: dict[str, dict[int, int]] = {}
        self._last_seen: dict[str, dict[int, float]] = {}
        self._recent: list[XidEvent] = []
        self._event_set: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rebuilds = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="gpulens-xid", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._drop_set()

    def run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                self.poll_once()
                backoff = 1.0
            except EventsUnavailable as exc:
                log.warning("XID events disabled: %s", exc)
                return
            except Exception as exc:  # keep watching whatever NVML does
                log.warning("XID event wait failed (%s); rebuilding the event set in %.0f s", exc, backoff)
                self._drop_set()
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)

    def poll_once(self) -> XidEvent | None:
        """Wait up to ``wait_ms`` for one event; record and return it (``None`` on timeout)."""
        if self._event_set is None:
            self._build_set()
        nvml = self._funnel.nvml
        try:
            data = self._funnel.call_raw("nvmlEventSetWait", self._event_set, self._wait_ms)
        except nvml.NVMLError as exc:
            if nvml_error_code(exc) == TIMEOUT:
                return None
            raise
        uuid = self._funnel.call("nvmlDeviceGetUUID", data.device)
        if uuid is None:
            return None
        event = XidEvent(
            gpu_uuid=str(uuid),
            code=int(data.eventData),
            at=self._clock(),
            gpu_instance_id=_instance_id(data.gpuInstanceId),
            compute_instance_id=_instance_id(data.computeInstanceId),
        )
        self.record(event)
        return event

    def record(self, event: XidEvent) -> None:
        with self._lock:
            per_gpu = self._counts.setdefault(event.gpu_uuid, {})
            per_gpu[event.code] = per_gpu.get(event.code, 0) + 1
            self._last_seen.setdefault(event.gpu_uuid, {})[event.code] = event.at
            self._recent.append(event)
            del self._recent[:-256]
        if self._on_event is not None:
            self._on_event(event)

    def counts(self, gpu_uuid: str) -> tuple[dict[int, int], dict[int, float]]:
        """(code -> events, code -> last seen) of one GPU, copied."""
        with self._lock:
            return dict(self._counts.get(gpu_uuid, {})), dict(self._last_seen.get(gpu_uuid, {}))

    def drain_recent(self) -> list[XidEvent]:
        """Events recorded since the previous call (for span events)."""
        with self._lock:
            events, self._recent = self._recent, []
        return events

    def _build_set(self) -> None:
        nvml = self._funnel.nvml
        event_set = self._funnel.call("nvmlEventSetCreate")
        if event_set is None:
            raise EventsUnavailable("NVML events are not available on this driver")
        for uuid, handle in self._handles().items():
            try:
                self._funnel.call("nvmlDeviceRegisterEvents", handle, nvml.nvmlEventTypeXidCriticalError, event_set)
            except GpuLifecycleError as exc:
                log.warning("cannot watch XIDs on %s: %s", uuid, exc)
        self._event_set = event_set
        self.rebuilds += 1

    def _drop_set(self) -> None:
        if self._event_set is not None:
            try:
                self._funnel.call("nvmlEventSetFree", self._event_set)
            except GpuLifecycleError:
                pass
            self._event_set = None


def _instance_id(value: int) -> int | None:
    value = int(value)
    return None if value == NO_INSTANCE else value
