"""The small slice of the Kubernetes API gpulens reads (GET JSON), behind an injectable interface.

``HttpKubernetesApi`` talks real HTTP (in-cluster service account by default); tests point it at a local
HTTP stand-in. Only GETs: the exporter never writes to the cluster.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import httpx

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def segment(name: str) -> str:
    """One URL path segment: names come from pods and labels, so ``/``, ``..`` or ``?`` must not steer the GET."""
    return quote(name, safe="") if name not in (".", "..") else name.replace(".", "%2E")


class KubernetesApiError(RuntimeError):
    """A GET failed (unreachable, forbidden, bad answer)."""

    source = "tenants"

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KubernetesApi(Protocol):
    def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        """GET ``path`` (e.g. ``/api/v1/namespaces/x``) and return the decoded JSON object."""
        ...


class HttpKubernetesApi:
    """GETs against an API server with a bearer token; one HTTP client reused."""

    def __init__(self, base_url: str, *, token: str | None = None, ca_file: Path | None = None,
                 timeout_seconds: float = 5.0) -> None:
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        verify: bool | str = str(ca_file) if ca_file else True
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, verify=verify,
                                    timeout=timeout_seconds)

    @classmethod
    def in_cluster(cls, timeout_seconds: float = 5.0) -> HttpKubernetesApi | None:
        """The API server of the pod's own cluster, or ``None`` outside a cluster."""
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        token_file = SERVICE_ACCOUNT / "token"
        if not host or not token_file.exists():
            return None
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", token=token_file.read_text().strip(),
                   ca_file=SERVICE_ACCOUNT / "ca.crt", timeout_seconds=timeout_seconds)

    def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        try:
            response = self._client.get(path, params=params)
        except httpx.HTTPError as exc:
            raise KubernetesApiError(f"GET {path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise KubernetesApiError(f"GET {path}: HTTP {response.status_code}", response.status_code)
        try:
            data = response.json()
        except ValueError as exc:
            raise KubernetesApiError(f"GET {path}: answer is not JSON") from exc
        if not isinstance(data, dict):
            raise KubernetesApiError(f"GET {path}: answer is not a JSON object")
        return data

    def close(self) -> None:
        self._client.close()
