"""The one Kubernetes client turns every way a request can fail into a typed ``KubernetesApiError``, which
is a ``UserError``: no ``httpx`` exception reaches a caller, and one no caller handles is one CLI line."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from gpulens.core.errors import UserError
from gpulens.core.kube_api import (
    KubeConnection,
    KubernetesApiError,
    KubernetesClient,
    MalformedAnswerError,
    NoAnswerError,
    UnreachableError,
)
from tests.fakes.kubernetes_api import ANY, FakeKubernetesApi


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_api_server_that_never_answers_is_no_answer_within_the_timeout() -> None:
    with FakeKubernetesApi() as api:
        api.hang(ANY, ANY, seconds=10, times=None)
        with KubernetesClient(api.url, timeout_s=0.5) as client, pytest.raises(NoAnswerError) as caught:
            client.get("/api/v1/nodes")
    assert isinstance(caught.value, UserError)
    assert str(caught.value) == "GET /api/v1/nodes: no answer within 0.5 s"


def test_a_closed_port_is_unreachable() -> None:
    server = f"http://127.0.0.1:{_closed_port()}"
    with KubernetesClient(server, timeout_s=2) as client, pytest.raises(UnreachableError,
                                                                         match=f"cannot reach the API server {server}"):
        client.apply("/api/v1/nodes/n1", {"metadata": {"name": "n1"}}, force=False)


def test_an_html_page_instead_of_json_is_a_malformed_answer() -> None:
    with FakeKubernetesApi() as api:
        api.answer_raw("GET", "/api/v1/nodes", b"<html>proxy says hi</html>")
        with KubernetesClient(api.url) as client, pytest.raises(MalformedAnswerError, match="not a JSON object"):
            client.get("/api/v1/nodes")


def test_a_path_that_is_not_a_url_is_an_api_error_not_an_httpx_error() -> None:
    with FakeKubernetesApi() as api, KubernetesClient(api.url) as client:
        with pytest.raises(KubernetesApiError, match="cannot send the request"):
            client.get("/api/v1/namespaces/a\x00b")


def test_a_missing_ca_file_is_an_api_error_naming_the_server(tmp_path: Path) -> None:
    connection = KubeConnection("https://10.0.0.1:443", verify=str(tmp_path / "no-such-ca.crt"))
    with pytest.raises(UnreachableError, match="https://10.0.0.1:443: cannot use the TLS files") as caught:
        KubernetesClient(connection)
    assert isinstance(caught.value, UserError)
