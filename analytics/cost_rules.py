"""The chargeback's cost rules, by name: how a MIG instance is priced and where unallocated cost goes.

Each rule is one registry entry (``analyze --mig-proration``, ``--unallocated``; the same names in a
config file), so a new rule is an entry here, listed by ``--help`` and accepted by the command without
editing it. The rule a run used is recorded in its chargeback rows (``x_MigProration``,
``x_UnallocatedPolicy``) and in its parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpulens.core.mig_catalog import MEMORY_SLICES
from gpulens.core.registry import Registry

MIG_PRORATIONS: Registry[str] = Registry("MIG proration")
"""A MIG instance's share of its GPU's price, as a SQL expression over the device (``d``: ``devices``) and
its profile (``p``: the MIG catalog's profile row, NULL columns where the profile is not catalogued).
Our constants: never text a user typed."""

MIG_PRORATIONS.register("slices", "by compute slices: its GPU-equivalents")("d.gpu_equivalents")
MIG_PRORATIONS.register("memory", "by memory slices; by compute slices where the profile is not catalogued")(
    f"coalesce(p.memory_slices / {float(MEMORY_SLICES)}, d.gpu_equivalents)"
)

ShareRule = Callable[[Mapping[str, float]], Mapping[str, float]]
"""A day's tenants and their allocated cost that day -> each tenant's share of the day's unallocated cost
(the shares add up to 1)."""

UNALLOCATED_SHARING: Registry[ShareRule | None] = Registry("rule for unallocated cost")
"""Where unallocated cost goes: shared by a :data:`ShareRule`, or (None) kept on a line of its own."""

UNALLOCATED_SHARING.add("own-line", "an __unallocated__ line of its own", lambda: None)


def _even(weights: Mapping[str, float]) -> Mapping[str, float]:
    return {tenant: 1.0 / len(weights) for tenant in weights}


def _proportional(weights: Mapping[str, float]) -> Mapping[str, float]:
    total = sum(weights.values())
    if total == 0:
        return _even(weights)
    return {tenant: w / total for tenant, w in weights.items()}


UNALLOCATED_SHARING.add("even", "shared evenly between the day's tenants", lambda: _even)
UNALLOCATED_SHARING.add("proportional", "shared in proportion to each tenant's allocated cost that day",
                        lambda: _proportional)
