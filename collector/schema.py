"""The store's schema, in one place: every table the collector writes and analytics reads.

Conventions: timestamps are ``TIMESTAMP`` in UTC; memory in bytes; activity as a ratio 0..1; power in
watts, energy in joules; compute shares in GPU-equivalents (GE: 1 per whole GPU, g/7 per MIG
instance, 1/replicas per shared replica). ``NULL`` means "not measured", never zero. Analytics
result tables are created by ``analytics`` and are not listed here.
"""

from __future__ import annotations

import duckdb

from collector.allocation_claims import CLAIMS_TABLE, TIMING_COLUMNS, expand_sql
from collector.schema_version import SCHEMA_VERSION, check_version, log, migrate, store_path
from collector.stored_credentials import redact_stored_credentials

DIMENSIONS = {
    "nodes": """
        node VARCHAR PRIMARY KEY,
        pool VARCHAR,
        gpu_model VARCHAR,
        sharing_mode VARCHAR,
        nvlink_domain VARCHAR,
        dedicated_tenant VARCHAR,
        labels JSON,
        first_seen TIMESTAMP,
        last_seen TIMESTAMP
    """,
    "gpus": """
        gpu_uuid VARCHAR PRIMARY KEY,
        node VARCHAR NOT NULL,
        gpu_index INTEGER,
        gpu_model VARCHAR,
        memory_total_bytes BIGINT,
        sharing_mode VARCHAR,
        replicas INTEGER DEFAULT 1,
        first_seen TIMESTAMP,
        last_seen TIMESTAMP
    """,
    "devices": """
        device_id VARCHAR PRIMARY KEY,
        gpu_uuid VARCHAR NOT NULL,
        node VARCHAR NOT NULL,
        gpu_model VARCHAR,
        kind VARCHAR NOT NULL,            -- 'gpu' or 'mig'
        profile VARCHAR NOT NULL,         -- 'gpu' for a whole GPU, else e.g. '1g.18gb'
        gpu_instance_id INTEGER,
        compute_instance_id INTEGER,
        slices INTEGER,
        gpu_equivalents DOUBLE NOT NULL,
        memory_total_bytes BIGINT,
        sharing_mode VARCHAR,
        first_seen TIMESTAMP,
        last_seen TIMESTAMP
    """,
    # Where each GPU sits inside its node (collector/topology.py): NULL where the hardware said nothing.
    "gpu_topology": """
        gpu_uuid VARCHAR PRIMARY KEY,
        node VARCHAR NOT NULL,
        gpu_index INTEGER,
        numa_node INTEGER,
        cpu_affinity VARCHAR,
        nvlink_domain VARCHAR,            -- fabric clique, else the node's NVLink-connected GPU group
        nvlink_peers INTEGER,             -- GPUs of the node reachable over NVLink
        fabric_cluster_uuid VARCHAR,
        fabric_clique_id BIGINT,
        first_seen TIMESTAMP,
        last_seen TIMESTAMP
    """,
    "tenants": """
        tenant VARCHAR PRIMARY KEY,
        cost_center VARCHAR,
        dedicated_pool VARCHAR,
        virtual_cluster VARCHAR
    """,
    # Kueue ResourceFlavors: which nodes a flavor selects (spec.nodeLabels), for capacity per flavor.
    "resource_flavors": """
        flavor VARCHAR PRIMARY KEY,
        node_labels JSON,
        first_seen TIMESTAMP,
        last_seen TIMESTAMP
    """,
    # The price book (analytics/prices.py): USD per whole-GPU hour per model, each with its source and the
    # time it holds (NULL: open-ended); the newest start in force wins.
    "price_book": """
        gpu_model VARCHAR NOT NULL,
        usd_per_gpu_hour DOUBLE NOT NULL,  -- list (on-demand) price
        contracted_usd_per_gpu_hour DOUBLE,  -- what is paid; NULL: the list price
        source VARCHAR NOT NULL,
        valid_from TIMESTAMP,
        valid_to TIMESTAMP,
        committed_share DOUBLE,  -- share of the GPU-hours under a commitment (a FOCUS bill); NULL: not known
        recorded_at TIMESTAMP NOT NULL
    """,
}

# Facts carry no PRIMARY KEY: a DuckDB primary key is an ART index that every insert probes and every
# checkpoint rewrites, so ingest cost grew with the store. Each fact's key is FACT_KEYS below, and
# :mod:`collector.store` keeps it unique (an anti-join against the stored rows of the batch's time span).
FACTS = {
    # One row per device per sample time. MIG memory is the GPU instance's (shared by its compute
    # instances); activity is NULL where the hardware gives none (e.g. A100 MIG).
    "device_samples": """
        ts TIMESTAMP NOT NULL,
        node VARCHAR NOT NULL,
        gpu_uuid VARCHAR NOT NULL,
        device_id VARCHAR NOT NULL,
        activity_ratio DOUBLE,
        memory_used_bytes BIGINT,
        memory_total_bytes BIGINT,
        source VARCHAR NOT NULL,
        activity_signal VARCHAR           -- the metric activity_ratio came from; NULL: not recorded
    """,
    # Physical readings, one row per GPU per sample time.
    "gpu_samples": """
        ts TIMESTAMP NOT NULL,
        node VARCHAR NOT NULL,
        gpu_uuid VARCHAR NOT NULL,
        up BOOLEAN,
        power_watts DOUBLE,
        energy_joules DOUBLE,
        temperature_celsius DOUBLE,
        sm_clock_hz DOUBLE,
        memory_clock_hz DOUBLE,
        throttle_reasons VARCHAR[],
        ecc_corrected_total BIGINT,
        ecc_uncorrected_total BIGINT,
        retired_pages_total BIGINT,
        remapped_rows_failure BOOLEAN,
        pcie_replay_total BIGINT,
        nvlink_crc_errors_total BIGINT,
        thermal_violation_seconds_total DOUBLE,
        source VARCHAR NOT NULL
    """,
    # Which container held which device at a sample time (one row per holder; shared GPUs have many). Stored
    # as claims (STORED_AS_CLAIMS): a view of this shape expands them into these rows.
    "allocations": """
        ts TIMESTAMP NOT NULL,
        node VARCHAR NOT NULL,
        gpu_uuid VARCHAR NOT NULL,
        device_id VARCHAR NOT NULL,
        namespace VARCHAR NOT NULL,
        pod VARCHAR NOT NULL,
        container VARCHAR NOT NULL,
        tenant VARCHAR NOT NULL,
        sharing_mode VARCHAR,
        gpu_equivalents DOUBLE NOT NULL,
        workload_kind VARCHAR,
        workload_name VARCHAR,
        source VARCHAR NOT NULL
    """,
    # Discrete events: XIDs (kind 'xid', code = XID number), health transitions, ...
    "events": """
        ts TIMESTAMP NOT NULL,
        node VARCHAR NOT NULL,
        gpu_uuid VARCHAR NOT NULL,
        device_id VARCHAR,
        kind VARCHAR NOT NULL,
        code INTEGER NOT NULL,
        count BIGINT NOT NULL DEFAULT 1,
        detail VARCHAR,
        source VARCHAR NOT NULL
    """,
    # Quota objects as seen at a time: Kueue ClusterQueue flavors/resources (and LocalQueues, Cohorts),
    # ResourceQuotas, KAI and Volcano queues (kinds as collector/queue_systems.py names them).
    "quota_snapshots": """
        ts TIMESTAMP NOT NULL,
        object_kind VARCHAR NOT NULL,     -- 'ClusterQueue', 'ResourceQuota', 'Queue.scheduling.run.ai', ...
        object_namespace VARCHAR NOT NULL DEFAULT '',
        object_name VARCHAR NOT NULL,
        tenant VARCHAR,
        flavor VARCHAR NOT NULL DEFAULT '',
        resource VARCHAR NOT NULL,        -- e.g. 'nvidia.com/gpu', 'nvidia.com/mig-1g.18gb'
        nominal_quota DOUBLE,
        borrowing_limit DOUBLE,
        lending_limit DOUBLE,
        usage DOUBLE,
        annotations JSON,
        source VARCHAR NOT NULL
    """,
    # Requests waiting for capacity (Kueue pending workloads, unschedulable pods), by shape.
    "pending_demand": """
        ts TIMESTAMP NOT NULL,
        tenant VARCHAR NOT NULL,
        cluster_queue VARCHAR NOT NULL DEFAULT '',  -- a ClusterQueue's name, '<kind>/<name>' of other queues
        namespace VARCHAR NOT NULL DEFAULT '',
        flavor VARCHAR NOT NULL DEFAULT '',
        resource VARCHAR NOT NULL,
        profile VARCHAR NOT NULL,         -- requested shape: 'gpu' or a MIG profile
        gpu_model VARCHAR NOT NULL DEFAULT '',
        quantity DOUBLE,                  -- devices of that shape; NULL: not measured (a count of pending
                                          -- workloads without shapes, resource '' and profile '')
        workloads INTEGER NOT NULL,
        source VARCHAR NOT NULL
    """,
    # Namespace inventory: tenancy layers that isolation risk looks at.
    "namespace_snapshots": """
        ts TIMESTAMP NOT NULL,
        namespace VARCHAR NOT NULL,
        tenant VARCHAR NOT NULL,
        labels JSON,
        network_policies INTEGER NOT NULL DEFAULT 0,
        virtual_cluster VARCHAR,
        source VARCHAR NOT NULL
    """,
    # Pod inventory with owners and GPU requests (for rightsizing by workload).
    "pod_snapshots": """
        ts TIMESTAMP NOT NULL,
        namespace VARCHAR NOT NULL,
        pod VARCHAR NOT NULL,
        uid VARCHAR,
        node VARCHAR,
        phase VARCHAR,
        tenant VARCHAR,
        queue VARCHAR,
        workload_kind VARCHAR,
        workload_name VARCHAR,
        gpu_requests JSON,                -- resource name -> quantity
        labels JSON,
        source VARCHAR NOT NULL
    """,
}

FACT_KEYS: dict[str, tuple[str, ...]] = {
    "device_samples": ("device_id", "ts"),
    "gpu_samples": ("gpu_uuid", "ts"),
    "allocations": ("device_id", "ts", "namespace", "pod", "container"),
    "events": ("gpu_uuid", "kind", "code", "ts"),
    "quota_snapshots": ("ts", "object_kind", "object_namespace", "object_name", "flavor", "resource"),
    "pending_demand": ("ts", "tenant", "cluster_queue", "namespace", "flavor", "resource", "profile", "gpu_model"),
    "namespace_snapshots": ("ts", "namespace"),
    "pod_snapshots": ("ts", "namespace", "pod"),
}
"""The unique key of each fact table (every key holds ``ts``; every key column is NOT NULL)."""

BOOKKEEPING = {
    # Per-source high-water mark: ingest resumes after it.
    "watermarks": """
        source VARCHAR PRIMARY KEY,
        watermark TIMESTAMP NOT NULL,
        updated_at TIMESTAMP NOT NULL
    """,
    # One row per committed ingest window; written in the same transaction as the window's rows.
    "ingest_batches": """
        source VARCHAR NOT NULL,
        window_start TIMESTAMP NOT NULL,
        window_end TIMESTAMP NOT NULL,
        rows BIGINT NOT NULL,
        committed_at TIMESTAMP NOT NULL,
        PRIMARY KEY (source, window_start, window_end)
    """,
    # Spans where a source was expected to deliver and did not: analytics treats them as unknown.
    "gaps": """
        source VARCHAR NOT NULL,
        target VARCHAR NOT NULL DEFAULT '',
        gap_start TIMESTAMP NOT NULL,
        gap_end TIMESTAMP NOT NULL,
        reason VARCHAR NOT NULL,
        PRIMARY KEY (source, target, gap_start)
    """,
    "schema_info": """
        key VARCHAR PRIMARY KEY,
        value VARCHAR NOT NULL
    """,
}

ALL_TABLES: dict[str, str] = {**DIMENSIONS, **FACTS, **BOOKKEEPING}
"""Every table as readers see it (``allocations`` is a view over its claims)."""

STORED_AS_CLAIMS: dict[str, str] = {"allocations": CLAIMS_TABLE}
"""Facts stored as claims (collector/allocation_claims.py): the fact's name is a view, the table holds claims."""

CLAIMS = {CLAIMS_TABLE: TIMING_COLUMNS + "\n".join(
    line for line in FACTS["allocations"].splitlines() if not line.strip().startswith("ts "))}
"""The tables that store claims, with their columns: the timing of a claim, then every column of its fact
but ``ts``."""

FACT_STORAGE: tuple[str, ...] = (*(t for t in FACTS if t not in STORED_AS_CLAIMS), *CLAIMS)
"""The tables that hold the facts' rows (what a store without facts lacks)."""


def fact_columns(fact: str) -> tuple[str, ...]:
    """The column names of a fact, in order (as its column list above names them)."""
    lines = (line.split("--")[0].strip() for line in FACTS[fact].splitlines())
    return tuple(text.split()[0] for text in lines if text)


def _create_claim_views(con: duckdb.DuckDBPyConnection) -> None:
    for fact, table in STORED_AS_CLAIMS.items():
        con.execute(f"CREATE OR REPLACE VIEW {fact} AS {expand_sql(table, fact_columns(fact))}")


def create_schema(con: duckdb.DuckDBPyConnection, path: str | None = None) -> list[str]:
    """Create every store table that does not exist yet and migrate an older store (idempotent); returns
    what the migration changed, which is also logged. A store from a newer or unknown schema version is
    refused (``StoreVersionUnsupported``) before anything is written. ``path`` names the store in messages
    (default: the file DuckDB has open)."""
    path = path or store_path(con)
    check_version(con, path)
    for name, columns in {**ALL_TABLES, **CLAIMS}.items():
        if name not in STORED_AS_CLAIMS:
            con.execute(f"CREATE TABLE IF NOT EXISTS {name} ({columns})")
    changes = migrate(con)
    _create_claim_views(con)
    for change in changes:
        log.warning("the store %s was upgraded: %s", path, change)
    redact_stored_credentials(con)
    con.execute(
        "INSERT OR REPLACE INTO schema_info VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
    )
    return changes


def connect(path: str, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """Open (and, unless read-only, initialise) the store at ``path``."""
    con = duckdb.connect(path, read_only=read_only)
    try:
        if read_only:
            check_version(con, path)
        else:
            create_schema(con, path)
    except BaseException:
        con.close()
        raise
    return con
