"""The card's folders are top-level packages of their own; a package of the same name from another
distribution (``analytics-python`` ships one called ``analytics``) would replace ours in a shared
environment. Each of ours says which distribution it belongs to, so that is a clear error, not a
traceback from deep inside a command.
"""

from __future__ import annotations

import importlib

OWN_PACKAGES = ("exporter", "collector", "analytics", "dashboards")
DISTRIBUTION = "gpulens"


def foreign_packages() -> list[str]:
    """``name (path)`` of each of our top-level packages that resolves to another distribution's, or none."""
    foreign = []
    for name in OWN_PACKAGES:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            foreign.append(f"{name} (cannot be imported: {exc})")
            continue
        if getattr(module, "DISTRIBUTION", None) != DISTRIBUTION:
            foreign.append(f"{name} ({getattr(module, '__file__', None) or 'a namespace package'})")
    return foreign


def own_packages_message() -> str | None:
    """The one-line error for packages that are not ours, or None when all are."""
    foreign = foreign_packages()
    if not foreign:
        return None
    return (f"the package(s) {', '.join(foreign)} are not gpulens's: another installed distribution provides a "
            "package of the same name; install gpulens in a virtual environment of its own")
