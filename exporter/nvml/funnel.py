"""The one funnel every NVML call goes through: errors are classified once, here.

* absent (``NotSupported``, ``NoPermission``, ``FunctionNotFound``, ``Deprecated``): the reading becomes
  ``None``; a function the driver lacks is remembered and never called again (old driver, new binding);
* lifecycle (``GpuIsLost``, ``Uninitialized``, ``DriverNotLoaded``, ``LibRmVersionMismatch``,
  ``GpuNotFound``): raised as :class:`GpuLifecycleError` so the source marks the GPU down and re-initialises;
* benign (``NotFound`` on empty MIG slots or missing samples, ``Timeout`` on event waits): ``None``.

Anything else (``Unknown``, ``InvalidArgument``...) is counted and treated as absent. The funnel talks to
an injected NVML module object (the real ``pynvml`` or a test fake with the same function names) and keeps
per-function call counts and latency for the hardware check.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# NVML return codes (nvml.h); stable across driver versions.
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
TIMEOUT = 10
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
DEPRECATED = 26
GPU_NOT_FOUND = 28
UNINITIALIZED = 1

_ABSENT = {NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND, DEPRECATED}
_LIFECYCLE = {GPU_IS_LOST, UNINITIALIZED, DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH, GPU_NOT_FOUND}
_DRIVER_WIDE = {UNINITIALIZED, DRIVER_NOT_LOADED, LIB_RM_VERSION_MISMATCH}
_BENIGN = {NOT_FOUND, TIMEOUT}


class ErrorClass(StrEnum):
    ABSENT = "absent"
    LIFECYCLE = "lifecycle"
    BENIGN = "benign"
    OTHER = "other"


def classify(code: int) -> ErrorClass:
    """The class of an NVML return code."""
    if code in _ABSENT:
        return ErrorClass.ABSENT
    if code in _LIFECYCLE:
        return ErrorClass.LIFECYCLE
    if code in _BENIGN:
        return ErrorClass.BENIGN
    return ErrorClass.OTHER


class GpuLifecycleError(Exception):
    """A GPU (or the whole driver, when ``driver_wide``) stopped answering; the caller marks it down."""

    def __init__(self, function: str, code: int, message: str) -> None:
        super().__init__(f"{function}: {message} (NVML error {code})")
        self.function = function
        self.code = code
        self.driver_wide = code in _DRIVER_WIDE


@dataclass
class CallStats:
    """Calls, failures and cumulative wall time of one NVML function."""

    calls: int = 0
    errors: int = 0
    seconds: float = 0.0
    max_seconds: float = 0.0
    last_error: str | None = None


class NvmlFunnel:
    """Calls functions of an NVML module object by name and classifies their errors once."""

    def __init__(self, nvml: Any, *, timer: Callable[[], float] = time.perf_counter) -> None:
        self.nvml = nvml
        self._timer = timer
        self._missing: set[str] = set()
        self._functions: dict[str, Callable[..., Any] | None] = {}
        self._lock = threading.Lock()
        self.stats: dict[str, CallStats] = {}
        self.error_counts: dict[ErrorClass, int] = {c: 0 for c in ErrorClass}

    def has(self, function: str) -> bool:
        """False once the driver said it lacks ``function`` (or the binding does not define it)."""
        return self._callable(function) is not None

    def call(self, function: str, *args: Any) -> Any:
        """``nvml.<function>(*args)``; ``None`` when absent or benign; lifecycle errors raise."""
        fn = self._callable(function)
        if fn is None:
            return None
        try:
            return self._invoke(function, fn, args)
        except self.nvml.NVMLError:
            return None

    def probe(self, function: str, *args: Any) -> bool:
        """Call once to learn whether a family exists here: False when the answer is "absent"."""
        if not self.has(function):
            return False
        before = self.error_counts[ErrorClass.ABSENT]
        self.call(function, *args)
        return self.error_counts[ErrorClass.ABSENT] == before

    def call_raw(self, function: str, *args: Any) -> Any:
        """Like :meth:`call` but lets non-lifecycle errors through as ``NVMLError`` (counted all the same).

        For callers that must tell "nothing happened" from "absent", e.g. the XID event wait.
        """
        fn = self._function(function)
        if fn is None:
            raise AttributeError(f"the NVML binding has no {function}")
        return self._invoke(function, fn, args)

    def _invoke(self, function: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """Call ``fn``, timing it; an ``NVMLError`` is classified and counted under the same lock hold."""
        stats = self._stats(function)
        start = self._timer()
        try:
            result = fn(*args)
        except self.nvml.NVMLError as exc:
            code = int(getattr(exc, "value", -1))
            kind = classify(code)
            with self._lock:
                self._count_call(stats, self._timer() - start)
                stats.errors += 1
                stats.last_error = str(exc)
                self.error_counts[kind] += 1
                if code == FUNCTION_NOT_FOUND:
                    self._missing.add(function)
            if kind is ErrorClass.LIFECYCLE:
                raise GpuLifecycleError(function, code, str(exc)) from exc
            raise
        except BaseException:
            with self._lock:
                self._count_call(stats, self._timer() - start)
            raise
        elapsed = self._timer() - start
        with self._lock:
            self._count_call(stats, elapsed)
        return result

    @staticmethod
    def _count_call(stats: CallStats, elapsed: float) -> None:
        stats.calls += 1
        stats.seconds += elapsed
        stats.max_seconds = max(stats.max_seconds, elapsed)

    def errors_of(self, kind: ErrorClass) -> int:
        """NVML errors of ``kind`` since the funnel was made (calls from any thread)."""
        with self._lock:
            return self.error_counts[kind]

    def missing_functions(self) -> frozenset[str]:
        return frozenset(self._missing)

    def _callable(self, function: str) -> Callable[..., Any] | None:
        """The binding's function, or None when the binding or the driver lacks it."""
        return None if function in self._missing else self._function(function)

    def _function(self, function: str) -> Callable[..., Any] | None:
        try:
            return self._functions[function]
        except KeyError:
            fn = getattr(self.nvml, function, None)
            self._functions[function] = fn
            return fn

    def _stats(self, function: str) -> CallStats:
        stats = self.stats.get(function)
        if stats is None:
            with self._lock:
                stats = self.stats.setdefault(function, CallStats())
        return stats


def nvml_error_code(exc: BaseException) -> int | None:
    """The NVML return code carried by an exception, if it is an ``NVMLError``."""
    value = getattr(exc, "value", None)
    return int(value) if isinstance(value, int) else None
