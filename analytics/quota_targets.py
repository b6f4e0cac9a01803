"""The quota objects ``recommend`` writes, by name (``--target``): what each writes, its writer loaded only when chosen.

A new target is a :class:`~analytics.writers.base.QuotaTarget` in ``analytics/writers/`` and one
entry here: ``recommend --help`` lists it, ``--target`` accepts it and a run without ``--target``
writes it too, without editing the command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpulens.core.registry import Registry

if TYPE_CHECKING:
    from analytics.writers.base import QuotaTarget

QUOTA_TARGETS: Registry[type[QuotaTarget]] = Registry("quota target")


def _kueue() -> type[QuotaTarget]:
    from analytics.writers.kueue import ClusterQueueTarget

    return ClusterQueueTarget


def _kai() -> type[QuotaTarget]:
    from analytics.writers.kai import KaiQueueTarget

    return KaiQueueTarget


def _resourcequota() -> type[QuotaTarget]:
    from analytics.writers.resourcequota import ResourceQuotaTarget

    return ResourceQuotaTarget


QUOTA_TARGETS.add("kueue", "Kueue ClusterQueues", _kueue)
QUOTA_TARGETS.add("kai", "KAI Scheduler Queues", _kai)
QUOTA_TARGETS.add("resourcequota", "namespace ResourceQuotas", _resourcequota)
