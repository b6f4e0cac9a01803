"""A pod's part of a GPU, as HAMi, KAI, milli-GPU, gpushare and Koordinator requests state it."""

from __future__ import annotations

from typing import Any

import pytest

from gpulens.core.gpu_share import GIB, MIB, GpuShare, pod_gpu_share


def _pod(limits: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "main", "resources": {"limits": limits or {}}}]}}


def test_hami_cores_and_memory_are_a_share_of_each_vgpu() -> None:
    share = pod_gpu_share(_pod({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "24576"}))
    assert share == GpuShare(0.3, None, 24576 * MIB, 1, "hami")
    assert share.share(80 * GIB) == pytest.approx(0.3)  # 24 GiB of 80 GiB is less than 30 % of the cores
    assert share.share(40 * GIB) == pytest.approx(0.6)  # memory is the larger part on a 40 GiB GPU


def test_hami_memory_percentage_alone_is_a_fraction_without_knowing_the_gpu() -> None:
    share = pod_gpu_share(_pod({"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50"}))
    assert share is not None and share.gpus == 2 and share.share() == pytest.approx(0.5)


def test_kai_gpu_fraction_annotation_is_a_share_of_compute_and_memory() -> None:
    share = pod_gpu_share(_pod(annotations={"gpu-fraction": "0.5"}))
    assert share is not None and share.scheme == "kai" and share.share() == pytest.approx(0.5)
    memory = pod_gpu_share(_pod(annotations={"gpu-memory": "8192"}))
    assert memory is not None and memory.memory_bytes == 8 * GIB and memory.share() is None
    assert memory.share(32 * GIB) == pytest.approx(0.25)


def test_milli_gpu_requests_read_as_thousandths_of_a_gpu_as_resource_or_annotation() -> None:
    assert pod_gpu_share(_pod({"alibabacloud.com/gpu-milli": "470"})).share() == pytest.approx(0.47)  # type: ignore[union-attr]
    assert pod_gpu_share(_pod(annotations={"alibabacloud.com/gpu-milli": "810"})).share() == pytest.approx(0.81)  # type: ignore[union-attr]


def test_gpushare_memory_is_in_gib_and_koordinator_in_percent() -> None:
    assert pod_gpu_share(_pod({"aliyun.com/gpu-mem": "8"})) == GpuShare(None, None, 8 * GIB, 1, "gpushare")
    koord = pod_gpu_share(_pod({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "40"}))
    assert koord is not None and koord.share() == pytest.approx(0.5)


def test_a_request_for_all_of_a_gpu_or_whole_gpus_is_not_a_fraction() -> None:
    assert pod_gpu_share(_pod({"nvidia.com/gpu": "2"})) is None
    assert pod_gpu_share(_pod({"alibabacloud.com/gpu-milli": "1000", "alibabacloud.com/gpu-count": "2"})) is None
    assert pod_gpu_share(_pod({"nvidia.com/gpucores": "100"})) is None
    assert pod_gpu_share(_pod(annotations={"gpu-fraction": "1"})) is None
