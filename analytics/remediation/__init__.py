"""Remediation: keep new work off failing GPUs' nodes with taints, under guard rails (dry-run by default)."""
