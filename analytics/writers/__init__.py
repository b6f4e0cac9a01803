"""Writers of quota objects (Kueue ClusterQueue, ResourceQuota, KAI Queue) and GPUQuotaRecommendation objects.

The quota targets are listed by name in :data:`analytics.quota_targets.QUOTA_TARGETS`."""

from analytics.writers.base import QuotaTarget, RbacRule

__all__ = ["QuotaTarget", "RbacRule"]
