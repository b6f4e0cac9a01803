"""Which nodes belong to which ResourceFlavor, as Kueue matches them; a node two flavors match belongs to neither."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import duckdb


@dataclass(frozen=True)
class FlavorNodes:
    """The nodes each flavor counts, and the nodes that more than one flavor matches (counted in none)."""

    members: Mapping[str, tuple[str, ...]]
    """Per flavor, the nodes it alone matches."""
    conflicts: Mapping[str, tuple[str, ...]]
    """Per node that several flavors match, those flavors (a configuration error)."""

    def shared_with_others(self, flavor: str) -> list[str]:
        """The nodes ``flavor`` matches together with another flavor (counted in neither)."""
        return [n for n, fl in sorted(self.conflicts.items()) if flavor in fl]

    def notes(self) -> list[str]:
        """One sentence per conflicting node: which node, which flavors, and that it is counted in none."""
        return [
            f"node {n} matches flavors {', '.join(fl)} (the nodeLabels of each select it): a configuration error; "
            "its devices are counted in none of them"
            for n, fl in sorted(self.conflicts.items())
        ]


def table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]).fetchone()
    return bool(row and row[0])


def match_flavor_nodes(con: duckdb.DuckDBPyConnection, flavors: Iterable[str]) -> FlavorNodes:
    """Assign nodes to flavors: a node matches a ResourceFlavor whose ``nodeLabels`` all hold on the node's
    labels (a flavor the store has no ResourceFlavor for: the nodes whose pool is its name). Every ResourceFlavor
    in the store takes part, not only ``flavors``, so the assignment does not depend on who asks."""
    nodes = con.execute("SELECT node, pool, labels FROM nodes ORDER BY node").fetchall()
    selectors: dict[str, dict[str, str]] = {}
    if table_exists(con, "resource_flavors"):
        for flavor, labels in con.execute("SELECT flavor, node_labels FROM resource_flavors").fetchall():
            selectors[str(flavor)] = _json_map(labels)
    owners: dict[str, list[str]] = defaultdict(list)
    for flavor in sorted(set(flavors) | set(selectors)):
        want = selectors.get(flavor)
        for node, pool, labels in nodes:
            if (want.items() <= _json_map(labels).items()) if want is not None else pool == flavor:
                owners[str(node)].append(flavor)
    members: dict[str, list[str]] = {f: [] for f in sorted(set(flavors))}
    conflicts = {}
    for node, fl in sorted(owners.items()):
        if len(fl) > 1:
            conflicts[node] = tuple(fl)
        else:
            members.setdefault(fl[0], []).append(node)
    return FlavorNodes({f: tuple(n) for f, n in members.items()}, conflicts)


def _json_map(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    data = json.loads(raw) if isinstance(raw, str) else raw
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
