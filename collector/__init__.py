"""Sources of samples and inventory, and idempotent ingest into the DuckDB store."""
