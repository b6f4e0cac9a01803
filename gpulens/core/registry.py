"""Named choices of one kind (an output format, a quota target), registered once and read by the CLI.

A command's ``--help`` lists a registry's names and what each is (:meth:`Registry.help`), and an
unknown name is refused with the names there are (:meth:`Registry.check`), so a new entry appears in
the CLI without editing the command. An entry is loaded only when chosen: a registry of heavy objects
(the quota writers) keeps the CLI's start light.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from gpulens.core.errors import UserError

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One choice: its name (what a flag takes), what it is (a few words for ``--help``), how to load it."""

    name: str
    summary: str
    load: Callable[[], T]


class Registry(Generic[T]):
    """The choices of one kind, by name, in the order they were added."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def add(self, name: str, summary: str, load: Callable[[], T]) -> None:
        """Register ``name``; ``load`` gives the object when it is chosen. A name is registered once."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = Entry(name, summary, load)

    def register(self, name: str, summary: str) -> Callable[[T], T]:
        """Decorator registering the object it decorates (already loaded) under ``name``."""

        def add(obj: T) -> T:
            self.add(name, summary, lambda: obj)
            return obj

        return add

    def remove(self, name: str) -> None:
        """Forget ``name`` (a test's temporary entry)."""
        del self._entries[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def entries(self) -> tuple[Entry[T], ...]:
        return tuple(self._entries.values())

    def help(self) -> str:
        """The choices for a flag's ``--help``: ``csv (FOCUS rows as CSV), parquet (the same rows as Parquet)``."""
        return ", ".join(f"{e.name} ({e.summary})" for e in self._entries.values())

    def check(self, name: str, flag: str) -> str:
        """``name`` if registered, else a :class:`UserError` naming ``flag`` and the choices."""
        if name not in self._entries:
            raise UserError(f"invalid {flag} {name!r}: use one of {', '.join(self._entries)}")
        return name

    def refusal(self, name: str) -> str | None:
        """Why a setting's ``name`` is refused (``'xlsx' is not a FOCUS format: use one of csv, parquet``);
        None when it is registered. For validators, whose error the command names by its flag."""
        if name in self._entries:
            return None
        return f"{name!r} is not a {self.kind}: use one of {', '.join(self._entries)}"

    def load(self, name: str) -> T:
        """The object registered as ``name`` (``KeyError`` when it is not: check a user's choice first)."""
        return self._entries[name].load()
