"""GE-hours a workload held in placements that spanned more domains than needed, per level.

The same figures :func:`analytics.placement.spread` gives placement by placement: a level counts for a
placement when every GPU of it has a key there and the fleet's shapes give its fewest domains; it is
affected when it spans more domains than that. Each placement comes as what it held
(:class:`analytics.placement.held_pairs.Held`: its pairs, pods, smallest pod and the domains it touched
per level), so no placement's pairs are listed; the fewest domains are worked out once per shape. The
hours are added up in the placements' order.
"""

from __future__ import annotations

from collections.abc import Sequence

from analytics.placement.held_pairs import Held
from analytics.placement.spread import LEVELS, FleetShapes, least_domains


def affected_hours(held: Sequence[Held], ge_hours: Sequence[float], fleet: FleetShapes) -> dict[str, float]:
    """Level -> GE-hours of the placements (what each held, with its hours) spread worse there.

    A level where one of a placement's GPUs has no key (or is not described) is not measured for it."""
    least: dict[tuple[str, int, int, int], int | None] = {}
    out: dict[str, float] = {}
    for h, hours in zip(held, ge_hours, strict=True):
        if h.devices < 1 or h.pods < 1:
            continue
        for level, spanned in zip(LEVELS, h.spanned, strict=True):
            if spanned is None:
                continue
            shape = (level, h.devices, h.pods, h.smallest_pod)
            if shape not in least:
                least[shape] = least_domains(level, h.devices, h.pods, h.smallest_pod, fleet)
            fewest = least[shape]
            if fewest is not None and 1 <= fewest < spanned:
                out[level] = out.get(level, 0.0) + hours
    return out
