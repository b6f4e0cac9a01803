"""The built-in fleet's day before :data:`END` (5-minute samples), analyzed in 5-minute buckets: its placements."""

from __future__ import annotations

from pathlib import Path

from analytics.run import analyze
from analytics.settings import AnalysisSettings
from collector.backfill import backfill_simulated

END = 1_780_000_200.0


def build_placement_store(db: Path) -> Path:
    """Backfill the day and analyze it (placement, topology_stranded and every other result table)."""
    backfill_simulated(str(db), start=END - 86400, end=END, step=300)
    analyze(db, AnalysisSettings(window_seconds="1d", bucket_seconds="5m"))
    return db
