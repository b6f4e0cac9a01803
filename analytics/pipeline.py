"""The order of ``analyze``'s stages: the day parts, the window-level stages, then the run's writes."""

from __future__ import annotations

from analytics.day_parts import PARTS
from analytics.stages import PART_READ, PART_SETUP, PART_WRITE, WINDOW, WRITE, Stage, check_order

PIPELINE: tuple[Stage, ...] = (PARTS, *WINDOW, *WRITE)
"""Every window-level stage in run order: the day parts found or computed and merged, the window-level
stages, then the run's writes in its transaction (``PART_STAGES`` run inside ``PARTS``, once per new day part)."""

PART_STAGES: tuple[Stage, ...] = (*PART_READ, *PART_WRITE)

__all__ = ["PARTS", "PART_SETUP", "PART_STAGES", "PIPELINE", "WINDOW", "WRITE", "check_order"]
