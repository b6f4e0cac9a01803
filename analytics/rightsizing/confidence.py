"""VPA-style confidence: how many days of evidence a recommendation stands on.

The VPA recommender uses ``confidence = min(lifespan_days, samples / samples_per_day)``: a long but
sparse history counts for no more than its samples, a dense but short one for no more than its span.
"""

from __future__ import annotations

from dataclasses import dataclass

SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True)
class Confidence:
    """Days of data behind a recommendation, the sample count, and the resulting figure."""

    history_days: float
    samples: int
    value: float
    """``min(history_days, samples / expected_samples_per_day)`` times any penalty factor."""
    label: str
    """``low``, ``medium`` or ``high``."""

    @property
    def is_low(self) -> bool:
        return self.label == "low"


def vpa_confidence(
    span_seconds: float,
    samples: int,
    sample_step_seconds: float,
    *,
    low_below_days: float,
    high_from_days: float = 7.0,
    factor: float = 1.0,
) -> Confidence:
    """Confidence from the evidence span and sample count at the store's native sampling step."""
    days = max(span_seconds, 0.0) / SECONDS_PER_DAY
    per_day = SECONDS_PER_DAY / max(sample_step_seconds, 1.0)
    value = min(days, samples / per_day) * factor
    label = "low" if value < low_below_days else "high" if value >= high_from_days else "medium"
    return Confidence(history_days=days, samples=samples, value=value, label=label)
