"""The Python values one run's stages hand on, one typed attribute per value.

A stage declares a value as ``value:<name>`` in its ``reads`` or ``writes`` (see
:mod:`analytics.stages`); the value is the attribute ``<name>`` of :class:`RunValues`, so mypy
checks its producer and every consumer. While a stage runs, :func:`RunValues.open_to` lets it read only
the values it declares (reads or writes) and set only those it declares it writes; reading a value
not set yet is an error too, never a default.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar, cast, overload

from analytics.chargeback import FleetCost
from analytics.health import HealthRows
from analytics.isolation import RiskRows
from analytics.placement.run import Finding
from analytics.placement.stranded import StrandedRow

T = TypeVar("T")

ModelPrices = dict[str, tuple[float, float, float | None]]
"""Per priced GPU model: its list and contracted USD per GPU-hour and its committed share (None: not known)."""

PREFIX = "value:"
"""How a stage's ``reads`` / ``writes`` name a value (``value:interval``), beside table names."""


class RunValue(Generic[T]):
    """One typed value of :class:`RunValues` (a descriptor): set by the stage that writes it, read by later ones."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> RunValue[T]: ...

    @overload
    def __get__(self, obj: RunValues, owner: type) -> T: ...

    def __get__(self, obj: RunValues | None, owner: type) -> RunValue[T] | T:
        if obj is None:
            return self
        obj.check(self.name, writing=False)
        if self.name not in obj.held:
            raise LookupError(f"{obj.who()} reads {PREFIX}{self.name} before any stage set it")
        return cast(T, obj.held[self.name])

    def __set__(self, obj: RunValues, value: T) -> None:
        obj.check(self.name, writing=True)
        obj.held[self.name] = value


class RunValues:
    """What a run's stages computed for later ones (the tables they share are in the store or temp tables)."""

    model_prices = RunValue[ModelPrices]("The setup's prices of the priced GPU models (``run.py``).")
    interval = RunValue[float]("The window's sample interval in seconds (decided from the days' sample spacings).")
    parts = RunValue[list[str]]("The ids of the window's day parts, in day order.")
    part_notes = RunValue[dict[str, str]](
        "Per day computed in this run (ISO date): why it was computed (the days not named were reused)."
    )
    health = RunValue[HealthRows]("The health of every GPU over the window (the flagged ones one by one).")
    risks = RunValue[RiskRows]("The isolation-risk findings of the window (per kind of GPU and per tenant).")
    placement = RunValue[list[Finding]]("Placement by topology: domains spanned vs needed per workload and level.")
    topology_stranded = RunValue[list[StrandedRow]]("Free capacity stranded by topology, per model and level.")
    fleet = RunValue[FleetCost]("The fleet's cost over the window, which the chargeback lines reconcile with.")

    def __init__(self) -> None:
        self.held: dict[str, object] = {}
        self._stage: str | None = None
        self._reads: frozenset[str] = frozenset()
        self._writes: frozenset[str] = frozenset()

    @classmethod
    def names(cls) -> frozenset[str]:
        """Every value's declared name (``value:<attribute>``)."""
        return frozenset(PREFIX + k for k, v in vars(cls).items() if isinstance(v, RunValue))

    @contextmanager
    def open_to(self, stage: str, reads: frozenset[str], writes: frozenset[str]) -> Iterator[None]:
        """While a stage runs: it reads only the values it declares (reads or writes) and sets only those it
        writes (``value:<name>`` entries; table names are ignored). A nested stage's scope ends with it."""
        before = self._stage, self._reads, self._writes
        self._stage, self._reads, self._writes = stage, reads | writes, writes
        try:
            yield
        finally:
            self._stage, self._reads, self._writes = before

    def check(self, name: str, *, writing: bool) -> None:
        """Raise ``ValueError`` when the running stage touches a value it does not declare (outside a stage: any)."""
        if self._stage is None:
            return
        if PREFIX + name not in (self._writes if writing else self._reads):
            verb = "sets" if writing else "reads"
            raise ValueError(f"{self.who()} {verb} {PREFIX}{name}, which it does not declare")

    def who(self) -> str:
        return "the run" if self._stage is None else f"stage {self._stage!r}"

    def set_names(self) -> frozenset[str]:
        """The values set so far (``value:<name>``)."""
        return frozenset(PREFIX + k for k in self.held)
