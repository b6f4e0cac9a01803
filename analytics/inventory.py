"""The fleet as analytics sees it: devices in the window with their price shares, and the MIG catalog.

Creates temp tables ``an_profiles`` (MIG catalog), ``an_dev``
(devices present in the window, priced) and ``an_addable`` (MIG profiles a GPU's unpartitioned
slices could still hold). ``an_dev`` numbers devices (``dk``), GPUs (``gk``) and node x model pairs
(``nk``) with small integers:
the per-bucket tables are keyed by them, names are joined back only when result rows are written.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import duckdb

from analytics.cost_rules import MIG_PRORATIONS
from analytics.facts import Window
from analytics.result_tables import insert_columns
from gpulens.core.mig_catalog import (
    COMPUTE_SLICES,
    MODELS,
    layout_problems,
    model_by_name,
    short_model,
)

if TYPE_CHECKING:
    from analytics.prices import PriceBook


def register_catalog(con: duckdb.DuckDBPyConnection, prices: PriceBook) -> None:
    """``an_profiles`` (model, profile, slices, memory slices), ``an_models`` (alias -> short, prices; NULL:
    unpriced)."""
    rows = [
        (m.short_name, p.name, p.compute_slices, p.memory_slices, p.gpu_equivalents)
        for m in MODELS.values()
        for p in m.mig_profiles
    ]
    columns = list(zip(*rows, strict=True))
    _temp_table(con, "an_profiles", {
        "gpu_model": ("VARCHAR", columns[0]), "profile": ("VARCHAR", columns[1]),
        "compute_slices": ("BIGINT", columns[2]), "memory_slices": ("BIGINT", columns[3]), "ge": ("DOUBLE", columns[4]),
    })
    names = {r[0] for r in con.execute("SELECT DISTINCT gpu_model FROM devices").fetchall()}
    names |= {r[0] for r in con.execute("SELECT DISTINCT gpu_model FROM gpus").fetchall()}
    aliases = sorted({str(n) for n in names if n is not None} | set(MODELS) | {m.name for m in MODELS.values()})
    shorts = [short_model(a) for a in aliases]
    _temp_table(con, "an_models", {
        "alias": ("VARCHAR", aliases),
        "short": ("VARCHAR", shorts),
        "list_price": ("DOUBLE", [prices.list_for(s) for s in shorts]),
        "contracted_price": ("DOUBLE", [prices.contracted_for(s) for s in shorts]),
    })


def _temp_table(con: duckdb.DuckDBPyConnection, name: str, columns: dict[str, tuple[str, Sequence[object]]]) -> None:
    """(Re)create temp table ``name`` with ``columns`` (name -> (DuckDB type, values)); the names and types
    are our constants, the values bound."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} ({', '.join(f'{c} {t}' for c, (t, _) in columns.items())})")
    insert_columns(con, name, {c: v for c, (_, v) in columns.items()})


def build_inventory(con: duckdb.DuckDBPyConnection, window: Window, mig_proration: str) -> None:
    """Create ``an_dev`` and ``an_addable`` for the window (prices NULL where the model is unpriced)."""
    mig_share = MIG_PRORATIONS.load(mig_proration)  # our SQL constant for the rule's name
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE an_dev AS
        SELECT
            d.device_id, d.gpu_uuid, d.node,
            coalesce(m.short, d.gpu_model) AS gpu_model,
            d.kind, d.profile,
            coalesce(d.sharing_mode, g.sharing_mode, CASE WHEN d.kind = 'mig' THEN 'mig' ELSE 'exclusive' END)
                AS sharing_mode,
            d.gpu_equivalents AS ge,
            coalesce(d.slices, p.compute_slices) AS slices,
            CASE WHEN d.kind = 'mig' THEN {mig_share} ELSE d.gpu_equivalents END AS cost_share,
            m.list_price, m.contracted_price,
            d.first_seen, d.last_seen, d.gpu_instance_id,
            coalesce(d.memory_total_bytes, g.memory_total_bytes) AS memory_total_bytes,
            coalesce(g.replicas, 1) AS replicas,
            CAST(row_number() OVER (ORDER BY d.device_id) AS INTEGER) AS dk,
            CAST(dense_rank() OVER (ORDER BY d.gpu_uuid) AS INTEGER) AS gk,
            CAST(dense_rank() OVER (ORDER BY d.node, coalesce(m.short, d.gpu_model)) AS INTEGER) AS nk,
            count(*) OVER (PARTITION BY d.gpu_uuid) > 1
                OR bool_or(d.kind = 'mig') OVER (PARTITION BY d.gpu_uuid) AS multi_device
        FROM devices d
        LEFT JOIN gpus g ON g.gpu_uuid = d.gpu_uuid
        LEFT JOIN an_models m ON m.alias = d.gpu_model
        LEFT JOIN an_profiles p ON p.gpu_model = coalesce(m.short, d.gpu_model) AND p.profile = d.profile
        WHERE (d.first_seen IS NULL OR d.first_seen < $end)
          AND (d.last_seen IS NULL OR d.last_seen >= $start)
        """.replace("{mig_share}", mig_share),
        {"start": window.start, "end": window.end},
    )
    _build_addable(con)


def _build_addable(con: duckdb.DuckDBPyConnection) -> None:
    """Per MIG GPU: the profiles that still fit next to its GPU instances (placement ignored)."""
    rows = con.execute(
        """
        SELECT gpu_uuid, any_value(gpu_model), list(profile ORDER BY profile)
        FROM (SELECT DISTINCT gpu_uuid, gpu_model, gpu_instance_id, profile FROM an_dev WHERE kind = 'mig')
        GROUP BY gpu_uuid
        """
    ).fetchall()
    fits_cache: dict[tuple[str, tuple[str, ...]], list[tuple[str, float]]] = {}
    out: dict[str, list] = defaultdict(list)
    for gpu_uuid, model_name, layout in rows:
        key = (str(model_name), tuple(layout))
        if key not in fits_cache:
            fits_cache[key] = _addable_profiles(*key)
        for profile, ge in fits_cache[key]:
            out["gpu_uuid"].append(gpu_uuid)
            out["profile"].append(profile)
            out["ge"].append(ge)
    _temp_table(con, "an_addable", {"gpu_uuid": ("VARCHAR", out["gpu_uuid"]), "profile": ("VARCHAR", out["profile"]),
                                     "ge": ("DOUBLE", out["ge"])})


def _addable_profiles(model_name: str, layout: tuple[str, ...]) -> list[tuple[str, float]]:
    try:
        model = model_by_name(model_name)
    except ValueError:
        return []
    if layout_problems(model, layout):
        return []
    return [
        (p.name, p.compute_slices / COMPUTE_SLICES)
        for p in model.mig_profiles
        if not layout_problems(model, (*layout, p.name))
    ]
