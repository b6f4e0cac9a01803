"""Identity of a simulated pod: its name and uid in each batch slot (stable for a seed)."""

from __future__ import annotations

from functools import lru_cache

from gpulens.sim.noise import stable_uuid
from gpulens.sim.plan import PodPlan


def pod_identity(seed: int, pod: PodPlan, slot: int) -> tuple[str, str]:
    """(name, uid) of a pod; batch pods get a new name and uid in every slot."""
    return _identity(seed, pod.key, pod.base_name, pod.workload.name, pod.workload.slot_seconds, slot)


@lru_cache(maxsize=65536)
def _identity(seed: int, key: int, base_name: str, workload: str, slot_seconds: float, slot: int) -> tuple[str, str]:
    if slot < 0:
        return base_name, stable_uuid(seed, "uid", key)
    job = f"{workload}-{int(slot * slot_seconds // 60)}"
    return f"{job}-{stable_uuid(seed, 'slotpod', key, slot)[:5]}", stable_uuid(seed, "uid", key, slot)
