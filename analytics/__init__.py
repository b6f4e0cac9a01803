"""Idle capacity, fragmentation, isolation risk, health, rightsizing, chargeback and quota write-back."""

DISTRIBUTION = "gpulens"  # checked by gpulens.core.own_packages: another package of this name is not ours
