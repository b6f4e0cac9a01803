"""Sources of samples and inventory, and idempotent ingest into the DuckDB store."""

DISTRIBUTION = "gpulens"  # checked by gpulens.core.own_packages: another package of this name is not ours
