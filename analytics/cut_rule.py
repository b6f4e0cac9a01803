"""The one cut rule of ``recommend`` and ``plan``: a quota cut needs at least ``--min-cut-days`` of evidence.

The evidence spans its first to its last bucket with data, the last bucket counted (``QuotaEvidence.days``).
One bucket more is tolerated: a window's first sample lands up to one sample step after the window's start
(data every 5 minutes over 14 days spans 13.997 days), and that step is not missing evidence.
"""

from __future__ import annotations

SECONDS_PER_DAY = 86_400
EPS = 1e-9


def cut_refusal(days: float, min_days: float, step_seconds: float) -> str | None:
    """Why no cut may stand on ``days`` of evidence in buckets of ``step_seconds`` (None: a cut may)."""
    if days + step_seconds / SECONDS_PER_DAY + EPS >= min_days:
        return None
    return (
        f"no cut: the evidence covers {days:.3f} days and a cut needs at least {min_days:g} (--min-cut-days, "
        f"less one {step_seconds:g} s bucket); a shorter window may raise, never cut"
    )
