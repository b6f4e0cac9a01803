"""Tell which dcgm-exporter naming generation one target speaks, and warn when it mixes them or none is known.

dcgm-exporter 4.9.0 renamed its fields (DCGM 4.7's naming standard) and the driver label, 4.10.0 the
PCIe and NVLink profiling fields. The names a target serves say which: :func:`speaks` returns one
line for the target's output (``dcgm-exporter 4.9``) and the warnings that must not be a silent gap:
a scrape that mixes generations, one that carries DCGM series but none the collector reads, and DCGM
fields the name table does not know (they are not ingested).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from collector.dcgm_fields import (
    KNOWN_NAMES,
    LEGACY_DRIVER_LABEL,
    NEW_DRIVER_LABEL,
    READ_AS,
    RENAMED_IN_4_9,
    RENAMED_IN_4_10,
    TABLE_SOURCE,
)
from gpulens.core.metric_catalog import PREFIX

PRE_4_9 = "dcgm-exporter before 4.9 (pre-4.9 names)"
V4_9 = "dcgm-exporter 4.9 (DCGM 4.7 names)"
V4_9_OR_LATER = "dcgm-exporter 4.9 or later (DCGM 4.7 names)"
V4_10_OR_LATER = "dcgm-exporter 4.10 or later"
MIXED = "mixed dcgm-exporter generations"
UNTOLD = "dcgm-exporter (no renamed field served: generation not told)"
GPULENS = "gpulens exporter"


@dataclass(frozen=True)
class Speaks:
    """The naming generation of one target and what about it deserves a warning."""

    generation: str | None
    """One of the constants above; ``None`` when the target serves neither gpulens nor DCGM series."""
    warnings: tuple[str, ...] = ()


def _listed(names: set[str], limit: int = 3) -> str:
    shown = sorted(names)[:limit]
    return ", ".join(shown) + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def _label_present(long: pl.DataFrame, label: str) -> bool:
    return label in long.columns and long.get_column(label).drop_nulls().len() > 0


def speaks(long: pl.DataFrame) -> Speaks:
    """What generation the samples of one target (a long frame) speak, and the warnings about them."""
    if long.height == 0 or "metric" not in long.columns:
        return Speaks(None)
    metrics = set(long.get_column("metric").unique().to_list())
    dcgm = {m for m in metrics if m.startswith("DCGM_FI_")}
    if not dcgm:
        return Speaks(GPULENS if any(m.startswith(PREFIX) for m in metrics) else None)
    old = (dcgm & set(RENAMED_IN_4_9)) | ({LEGACY_DRIVER_LABEL} if _label_present(long, LEGACY_DRIVER_LABEL) else set())
    new = (dcgm & set(RENAMED_IN_4_9.values())) | (
        {NEW_DRIVER_LABEL} if _label_present(long, NEW_DRIVER_LABEL) else set())
    before_4_10, since_4_10 = dcgm & set(RENAMED_IN_4_10), dcgm & set(RENAMED_IN_4_10.values())
    warnings: list[str] = []
    if old and (new or since_4_10):
        generation = MIXED
        warnings.append(f"mixes dcgm-exporter generations: pre-4.9 names ({_listed(old)}) and 4.9+ names "
                        f"({_listed(new | since_4_10)}); each sample is converted by the name it has")
    elif before_4_10 and since_4_10:
        generation = MIXED
        warnings.append(f"mixes dcgm-exporter generations: 4.9 names ({_listed(before_4_10)}) and 4.10+ names "
                        f"({_listed(since_4_10)})")
    elif since_4_10:
        generation = V4_10_OR_LATER
    elif new:
        generation = V4_9 if before_4_10 else V4_9_OR_LATER
    elif old:
        generation = PRE_4_9
    else:
        generation = UNTOLD
    if not dcgm & set(READ_AS):
        warnings.append(f"serves DCGM series but none of the fields gpulens reads, under any generation's name "
                        f"({_listed(dcgm)}): nothing of it is stored")
    unknown = dcgm - KNOWN_NAMES
    if unknown:
        warnings.append(f"serves {len(unknown)} DCGM field(s) that gpulens's name table ({TABLE_SOURCE}) does "
                        f"not know, not stored: {_listed(unknown)}")
    return Speaks(generation, tuple(warnings))


def speaks_by_target(long: pl.DataFrame, label: str = "instance") -> dict[str, Speaks]:
    """:func:`speaks` per scrape target of samples read from Prometheus (by its ``instance`` label)."""
    if long.height == 0 or label not in long.columns:
        return {}
    parts = long.filter(pl.col(label).is_not_null()).partition_by(label, as_dict=True)
    return {str(key[0]): speaks(part) for key, part in parts.items()}


@dataclass
class TargetGenerations:
    """The generations each target spoke over a collection, in order (an upgrade shows as two), and the
    warnings met, each once."""

    seen: dict[str, list[str]]
    warnings: dict[str, None]

    @classmethod
    def empty(cls) -> TargetGenerations:
        return cls({}, {})

    def add(self, by_target: dict[str, Speaks]) -> None:
        for target, said in sorted(by_target.items()):
            if said.generation is not None:
                seen = self.seen.setdefault(target, [])
                if not seen or seen[-1] != said.generation:
                    seen.append(said.generation)
            for warning in said.warnings:
                self.warnings[f"{target}: {warning}"] = None

    def lines(self) -> list[str]:
        """``target T: speaks A`` (``, then B`` after an upgrade), one per target."""
        return [f"target {target}: speaks {', then '.join(seen)}" for target, seen in sorted(self.seen.items())]
