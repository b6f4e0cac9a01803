"""Writers of quota objects (Kueue ClusterQueue, ResourceQuota, KAI Queue) and GPUQuotaRecommendation objects."""

from gpulens.analytics.writers import kai, kueue, resourcequota  # noqa: F401  (register the targets)
from gpulens.analytics.writers.base import TARGETS, QuotaTarget, RbacRule

__all__ = ["TARGETS", "QuotaTarget", "RbacRule"]
