"""The fleet a placement is measured against: every exclusive whole GPU the store knows, as columns.

One row per GPU, in the order the store lists them: its UUID, GPU model and its domain key at each topology
level (``spread.LEVELS``; None where unknown). A window at a million GPUs reads them as one frame (the node labels
parsed once per distinct label set), so domain sizes and stranded capacity are grouped over columns; a
:class:`~analytics.placement.spread.GpuPlace` is built only for a GPU a workload holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping

import duckdb
import numpy as np
import polars as pl

from analytics.placement.settings import TopologySettings
from analytics.placement.spread import LEVELS, SCHEMA, GpuPlace, label_keys, places_frame

_GPUS = """
SELECT g.gpu_uuid, g.node, coalesce(m.short, g.gpu_model, '') AS gpu_model, t.numa_node, t.nvlink_domain,
       coalesce(n.labels::VARCHAR, '') AS labels
FROM gpus g
LEFT JOIN gpu_topology t USING (gpu_uuid)
LEFT JOIN nodes n ON n.node = g.node
LEFT JOIN an_models m ON m.alias = g.gpu_model
WHERE coalesce(g.sharing_mode, 'exclusive') = 'exclusive'
"""


class Fleet(Mapping[str, GpuPlace]):
    """GPUs by UUID (a mapping to their places, built on demand) over the columns of ``spread.SCHEMA``."""

    def __init__(self, frame: pl.DataFrame) -> None:
        self.frame = frame.select(list(SCHEMA))
        self._rows: dict[str, int] | None = None
        self._built: dict[str, GpuPlace] = {}

    @classmethod
    def of(cls, places: Iterable[GpuPlace]) -> Fleet:
        """The fleet of these places, in their order."""
        return cls(places_frame(places))

    def of_models(self, models: Iterable[str]) -> Fleet:
        """The GPUs of these models, in the fleet's order."""
        return Fleet(self.frame.filter(pl.col("gpu_model").is_in(list(models))))

    def chain_codes(self, gpus: list[str]) -> np.ndarray:
        """Per GPU of ``gpus``, a code per level (equal codes: the same domain; -1: no key there, or a GPU the
        fleet does not hold), shape ``(len(gpus), len(LEVELS))``."""
        asked = pl.DataFrame({"gpu_uuid": gpus}, schema={"gpu_uuid": pl.Utf8})
        joined = asked.join(self.frame, on="gpu_uuid", how="left", maintain_order="left")
        codes = [(joined[level].rank("dense").fill_null(0).cast(pl.Int64) - 1).to_numpy() for level in LEVELS]
        return np.stack(codes, axis=1) if gpus else np.zeros((0, len(LEVELS)), dtype=np.int64)

    def places_of(self, gpus: Iterable[str]) -> dict[str, GpuPlace]:
        """The places of those of ``gpus`` the fleet holds (one join, not an index of every GPU)."""
        asked = pl.DataFrame({"gpu_uuid": sorted(set(gpus))}, schema={"gpu_uuid": pl.Utf8})
        return {row["gpu_uuid"]: _place(row) for row in self.frame.join(asked, on="gpu_uuid", how="semi").iter_rows(named=True)}

    def _index(self) -> dict[str, int]:
        if self._rows is None:
            self._rows = dict(zip(self.frame["gpu_uuid"].to_list(), range(self.frame.height), strict=True))
        return self._rows

    def __getitem__(self, gpu: str) -> GpuPlace:
        place = self._built.get(gpu)
        if place is None:
            place = self._built[gpu] = _place(self.frame.row(self._index()[gpu], named=True))
        return place

    def __contains__(self, gpu: object) -> bool:
        return gpu in self._index()

    def __iter__(self) -> Iterator[str]:
        return iter(self.frame["gpu_uuid"].to_list())

    def __len__(self) -> int:
        return self.frame.height


def _place(row: dict[str, str | None]) -> GpuPlace:
    """A GPU's place from its row of the fleet."""
    return GpuPlace(str(row["gpu_uuid"]), str(row["node"]), str(row["gpu_model"]), {lvl: row[lvl] for lvl in LEVELS})


def as_fleet(places: Mapping[str, GpuPlace]) -> Fleet:
    """``places`` as a :class:`Fleet` (a mapping of places in its order, or a fleet already)."""
    return places if isinstance(places, Fleet) else Fleet.of(places.values())


def fleet_places(con: duckdb.DuckDBPyConnection, settings: TopologySettings) -> Fleet:
    """Every exclusive whole GPU the store knows, with its domain key at each level (rack, block and zone from
    its node's labels, as ``settings`` names them: the first label present wins)."""
    gpus = con.sql(_GPUS).pl()
    level_labels = settings.level_labels()
    texts = gpus["labels"].unique().to_list() if gpus.height else []
    named = [label_keys({lvl: next((labels[k] for k in keys if labels.get(k)), None)
                         for lvl, keys in level_labels.items()}) for labels in map(_labels, texts)]
    by_labels = pl.DataFrame({"labels": texts, **{lvl: [n[lvl] for n in named] for lvl in ("rack", "block", "zone")}},
                             schema={"labels": pl.Utf8, "rack": pl.Utf8, "block": pl.Utf8, "zone": pl.Utf8})
    numa = pl.col("numa_node")
    frame = gpus.join(by_labels, on="labels", how="left", maintain_order="left").with_columns(
        nvlink=pl.col("nvlink_domain"),
        numa=pl.when(numa.is_not_null()).then(pl.col("node") + "/numa-" + numa.cast(pl.Utf8)),
    )
    return Fleet(frame)


def _labels(text: str | None) -> dict[str, str]:
    """A node's labels from their JSON; none when it is missing or not an object of labels."""
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}
