"""Which analysis run an output shows, in words: window, bucket, threshold, price source, non-defaults."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from analytics.prices import PriceBook
from analytics.settings import AnalysisSettings

NOT_COMPARED = frozenset({"sample_interval_seconds", "parquet_dir", "prices", "price_book"})
"""Recorded parameters that are not choices with a default: the inferred sample interval, where the
facts were read from, and the resolved price book (shown as the price source: each model's price and source)."""


@dataclass(frozen=True)
class RunDescription:
    """One analysis run as an output's header states it."""

    run_id: str
    window_start: datetime
    window_end: datetime
    bucket_seconds: int
    activity_threshold: float | None
    price_source: str
    non_defaults: tuple[str, ...]
    """``name value (default d)`` for every recorded parameter that differs from ``analyze``'s default."""

    def header(self) -> str:
        """``Run <id>: window ... to ... UTC, 1 h buckets, activity threshold 0.05, prices: ...``."""
        threshold = "–" if self.activity_threshold is None else f"{self.activity_threshold:g}"
        return (
            f"Run {self.run_id}: window {self.window_start:%Y-%m-%d %H:%M} to {self.window_end:%Y-%m-%d %H:%M} UTC, "
            f"{_duration(self.bucket_seconds)} buckets, activity threshold {threshold}, prices: {self.price_source}"
        )

    def non_default_note(self) -> str:
        """A sentence naming the parameters that are not the defaults; empty when all are defaults."""
        if not self.non_defaults:
            return ""
        return "This run's parameters are not the defaults: " + "; ".join(self.non_defaults) + "."


def describe_run(
    run_id: str, window_start: datetime, window_end: datetime, bucket_seconds: int, parameters_json: str | None
) -> RunDescription:
    """Describe a run from its ``analysis_runs`` row (parameters as the stored JSON text)."""
    params: dict[str, Any] = json.loads(parameters_json or "{}")
    price_source = _price_source(params)
    threshold = params.get("activity_threshold")
    return RunDescription(
        run_id=run_id,
        window_start=window_start,
        window_end=window_end,
        bucket_seconds=int(bucket_seconds),
        activity_threshold=float(threshold) if isinstance(threshold, int | float) else None,
        price_source=price_source,
        non_defaults=tuple(_non_defaults(params)),
    )


def _non_defaults(params: dict[str, Any]) -> list[str]:
    defaults = _flatten(AnalysisSettings().parameters())
    recorded = _flatten({k: v for k, v in params.items() if k not in NOT_COMPARED})
    out = []
    for key, value in recorded.items():
        if key in defaults and _normal(value) != _normal(defaults[key]):
            out.append(f"{_name(key)} {_shown(key, value)} (default {_shown(key, defaults[key])})")
    return out


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _normal(value: Any) -> Any:
    return sorted(value) if isinstance(value, list) else value


def _price_source(params: dict[str, Any]) -> str:
    """The book's origin and, where the run recorded it, each model's price and source and the unpriced models."""
    prices = params.get("prices")
    if not isinstance(prices, dict):
        return "not recorded"
    origin = str(prices.get("origin", "not recorded"))
    book = params.get("price_book")
    if not isinstance(book, dict):
        return origin
    priced = PriceBook.from_json(book).lines(prices.get("usd_per_gpu_hour", {}))
    unpriced = [f"{m}: unpriced" for m in prices.get("unpriced", [])]
    return f"{origin} ({'; '.join(priced + unpriced)})" if priced or unpriced else origin


def _name(key: str) -> str:
    names = {"window_seconds": "window", "bucket_seconds": "bucket", "activity_threshold": "activity threshold",
             "prices_path": "prices file", "mig_proration": "MIG proration", "unallocated": "unallocated cost"}
    return names.get(key, key)


def _shown(key: str, value: Any) -> str:
    if key in ("window_seconds", "bucket_seconds") and isinstance(value, int):
        return _duration(value)
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in sorted(value)) + "]"
    return "none" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"
