"""A day cut into ranges of nodes, for the largest fleets: each (day, range) is a part of its own.

The fleet's nodes (the ``nodes`` dimension, sorted by name; every worker holds the same copy) are cut
into ``count`` contiguous ranges by boundary **names**: range *i* is ``[lo, hi)``, the first open below,
the last open above, so every node name, one the inventory does not list included, falls into exactly
one range. A range part reads only its range's device samples, allocations and GPU samples (filtered
by ``node``) and only its range's devices; what is not per node (pending demand, quota and pod
snapshots, gaps) it reads whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from gpulens.core.errors import UserError

NODE_FACTS = ("device_samples", "allocations", "gpu_samples")
"""Facts of a day part that a node range filters by ``node`` (the rest a part reads whole)."""


@dataclass(frozen=True)
class NodeRange:
    """Range ``index`` of ``count``: node names ``lo <= node < hi`` (None: open)."""

    index: int
    count: int
    lo: str | None
    hi: str | None

    def sql(self, column: str = "node") -> str:
        """A SQL condition on ``column`` (the names quoted as literals)."""
        terms = [f"{column} >= {_literal(self.lo)}" if self.lo is not None else "",
                 f"{column} < {_literal(self.hi)}" if self.hi is not None else ""]
        return " AND ".join(t for t in terms if t) or "true"

    def holds(self, node: str) -> bool:
        return (self.lo is None or node >= self.lo) and (self.hi is None or node < self.hi)

    @property
    def key(self) -> list[object]:
        """What a part id covers of the range."""
        return [self.index, self.count, self.lo, self.hi]

    @property
    def label(self) -> str:
        lo = "" if self.lo is None else self.lo
        hi = "" if self.hi is None else self.hi
        return f"nodes {self.index + 1}/{self.count} [{lo or '-'} .. {hi or '-'})"


def _literal(name: str) -> str:
    return "'" + name.replace("'", "''") + "'"


def node_ranges(con: duckdb.DuckDBPyConnection, count: int) -> list[NodeRange]:
    """The ``count`` ranges of the ``nodes`` dimension (boundaries: the names at k x n / count, sorted)."""
    if count < 1:
        raise UserError(f"--node-ranges {count}: must be at least 1")
    names = [r[0] for r in con.execute("SELECT node FROM nodes ORDER BY node").fetchall()]
    if count > 1 and len(names) < count:
        raise UserError(f"--node-ranges {count}: the store's nodes dimension lists {len(names)} node(s); "
                        "give at most that many ranges")
    bounds: list[str | None] = [None, *(names[k * len(names) // count] for k in range(1, count)), None]
    return [NodeRange(i, count, bounds[i], bounds[i + 1]) for i in range(count)]
