"""A Kubernetes list reply of the wrong shape is one clear line naming the request and what it held."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from collector.inventory import CORE_LISTS
from tests.fakes.kubernetes_api import FakeKubernetesApi
from tests.support.cli import assert_one_line_error, gpulens


@pytest.mark.parametrize(("reply", "held"), [
    ({"kind": "NodeList", "items": [1, None]}, "items[0] is 1, not an object"),
    ({"kind": "NodeList", "items": {"a": 1}}, 'items is {"a": 1}, not a list'),
    ({"kind": "NodeList", "items": [{"metadata": "gpu-node-1"}]}, 'items[0].metadata is "gpu-node-1", not an object'),
    ({"kind": "NodeList", "items": [{"metadata": {"name": "n", "labels": ["gpu"]}}]},
     'items[0].metadata.labels is ["gpu"], not an object'),
    ({"kind": "NodeList", "items": [{"metadata": {"name": "n"}, "status": 3}]}, "items[0].status is 3, not an object"),
])
def test_a_node_list_of_the_wrong_shape_is_one_line_naming_the_request_and_what_it_held(
    tmp_path: Path, reply: dict[str, Any], held: str
) -> None:
    with FakeKubernetesApi() as fake:
        for path in CORE_LISTS.values():
            fake.objects[path] = {"kind": "List", "items": []}
        fake.objects[CORE_LISTS["nodes"]] = reply
        proc = gpulens("collect", "--kubernetes", "--kubeconfig", str(fake.kubeconfig(tmp_path)),
                       "--db", str(tmp_path / "inventory.duckdb"), timeout=120)
    assert_one_line_error(proc, "Kubernetes inventory failed: GET /api/v1/nodes: the list has the wrong shape: "
                          + held)
