"""Writers of quota objects (Kueue ClusterQueue, ResourceQuota, KAI Queue) and GPUQuotaRecommendation objects."""

from analytics.writers import kai, kueue, resourcequota  # noqa: F401  (register the targets)
from analytics.writers.base import TARGETS, QuotaTarget, RbacRule

__all__ = ["TARGETS", "QuotaTarget", "RbacRule"]
