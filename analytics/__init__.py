"""Idle capacity, fragmentation, isolation risk, health, rightsizing, chargeback and quota write-back."""
