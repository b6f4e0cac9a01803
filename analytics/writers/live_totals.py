"""Each flavor's live total of quotas, read back from the API server after a partial apply, against its capacity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from analytics.writers.base import QuotaTarget, printable
from gpulens.core.kube_api import KubernetesApiError, KubernetesClient

QueueRef = tuple[QuotaTarget, str, str]
"""(target, namespace, name) of one quota object."""


@dataclass(frozen=True)
class LiveTotal:
    """The sum of one flavor and resource's live quotas over the objects that share it."""

    flavor: str
    resource: str
    total: float
    """Over the objects that could be read (``unread`` names the others)."""
    objects: int
    capacity: int | None
    """Units the quotas may sum to (None: not known here)."""
    unread: tuple[str, ...] = ()

    @property
    def over(self) -> bool:
        return self.capacity is not None and self.total > self.capacity

    def line(self) -> str:
        what = f"{self.flavor}/{self.resource}" if self.flavor else self.resource
        total = f"{self.total:g}" if not self.unread else f"at least {self.total:g}"
        head = f"{what}: live total {total} over {self.objects} object(s)"
        if self.capacity is None:
            verdict = "capacity not known (no devices on the flavor's nodes in the store)"
        elif self.over:
            verdict = f"OVER capacity {self.capacity} by {self.total - self.capacity:g}"
        else:
            verdict = f"of capacity {self.capacity}" + (" so far" if self.unread else "")
        unread = f"; not readable: {', '.join(self.unread)}" if self.unread else ""
        return f"{head}, {verdict}{unread}"


def read_live_totals(
    api: KubernetesClient,
    members: Mapping[tuple[str, str], Sequence[QueueRef]],
    capacity: Mapping[tuple[str, str], int],
) -> list[LiveTotal]:
    """Per (flavor, resource) in ``members``: GET every object that shares it and add up its live quota."""
    live: dict[str, Mapping[tuple[str, str], float] | str] = {}
    out = []
    for key in sorted(members):
        total, unread = 0.0, []
        for target, namespace, name in members[key]:
            path = target.path(namespace, name)
            if path not in live:
                live[path] = _values(api, target, path)
            values = live[path]
            ref = f"{target.object_kind} {printable(f'{namespace}/{name}' if namespace else name)}"
            if isinstance(values, str):
                unread.append(f"{ref} ({values})")
            else:
                total += values.get(key, 0.0)
        out.append(LiveTotal(key[0], key[1], total, len(members[key]), capacity.get(key), tuple(unread)))
    return out


def _values(api: KubernetesClient, target: QuotaTarget, path: str) -> Mapping[tuple[str, str], float] | str:
    try:
        return target.current_values(api.get(path))
    except KubernetesApiError as exc:
        return exc.message
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"unexpected object: {exc}"
