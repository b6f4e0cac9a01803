"""What each tenant of the report fixture store owns by name, and a check that a text names none of another's."""

from __future__ import annotations

import html

from tests.support.report_store import EVIL_TENANT

OWNED: dict[str, tuple[str, ...]] = {
    "vision": ("vision", "vision-train", "trainer-0", "trainer-1"),
    "nlp": ("nlp", "nlp-dev", "notebook-0", "nlp-cq"),
    EVIL_TENANT: (EVIL_TENANT, "evil-ns", "evil-pod", "alert(1)"),
}
"""Tenant -> its name, namespaces, pods and queues in ``tests.support.report_store`` (``alert(1)`` is the
part of the hostile name that survives any escaping)."""


def leaks(text: str, viewer: str) -> list[str]:
    """The names of other tenants than ``viewer`` that ``text`` contains, raw or HTML-escaped."""
    found = []
    for tenant, names in OWNED.items():
        if tenant == viewer:
            continue
        for name in names:
            if name in text or html.escape(name, quote=True) in text or html.escape(name, quote=False) in text:
                found.append(name)
    return found
