"""A thin Kubernetes API client for the writers: GET and server-side apply over HTTP, nothing else.

Server-side apply is a ``PATCH`` with content type ``application/apply-patch+yaml``, a field manager and
optionally ``force=true``; the body is the object with only the fields we own. Errors become typed
exceptions so the applier can retry on 409 and explain a 403.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

APPLY_PATCH_CONTENT_TYPE = "application/apply-patch+yaml"
FIELD_MANAGER = "gpulens"


class KubeApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, method: str, path: str, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status
        self.method = method
        self.path = path
        self.message = message


class ConflictError(KubeApiError):
    """409: the object changed since it was read (or a field-manager conflict)."""


class ForbiddenError(KubeApiError):
    """403: the caller's RBAC does not allow the request."""


class NotFoundError(KubeApiError):
    """404."""


_ERRORS: dict[int, type[KubeApiError]] = {404: NotFoundError, 403: ForbiddenError, 409: ConflictError}


@dataclass(frozen=True)
class KubeConnection:
    """Where the API server is and how to authenticate."""

    server: str
    headers: Mapping[str, str]
    verify: bool | str = True
    cert: tuple[str, str] | None = None


class KubeApi:
    """GET and server-side apply against one API server."""

    def __init__(self, connection: KubeConnection, *, timeout_s: float = 30.0) -> None:
        self._client = httpx.Client(
            base_url=connection.server.rstrip("/"), headers=dict(connection.headers),
            verify=connection.verify, cert=connection.cert, timeout=timeout_s,
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> KubeApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, path: str) -> dict[str, Any]:
        return self._check("GET", path, self._client.get(path, headers={"Accept": "application/json"}))

    def apply(self, path: str, body: Mapping[str, Any], *, force: bool) -> dict[str, Any]:
        """Server-side apply ``body`` (JSON is valid YAML) as field manager ``gpulens``."""
        params = {"fieldManager": FIELD_MANAGER}
        if force:
            params["force"] = "true"
        response = self._client.patch(
            path, params=params, content=json.dumps(body, sort_keys=True),
            headers={"Content-Type": APPLY_PATCH_CONTENT_TYPE, "Accept": "application/json"},
        )
        return self._check("PATCH", path, response)

    @staticmethod
    def _check(method: str, path: str, response: httpx.Response) -> dict[str, Any]:
        if response.status_code < 400:
            data = response.json()
            return data if isinstance(data, dict) else {}
        try:
            message = str(response.json().get("message", response.text))
        except (ValueError, AttributeError):
            message = response.text.strip() or response.reason_phrase
        raise _ERRORS.get(response.status_code, KubeApiError)(response.status_code, method, path, message)


def connection_from_kubeconfig(path: Path | None = None, context: str | None = None) -> KubeConnection:
    """Read a kubeconfig (``path``, else ``$KUBECONFIG`` or ``~/.kube/config``; in a pod, the service account)."""
    import yaml
    from kubernetes import client, config  # heavy import, only when applying
    from kubernetes.config.config_exception import ConfigException

    cfg = client.Configuration()
    try:
        if path is None and "KUBERNETES_SERVICE_HOST" in os.environ and "KUBECONFIG" not in os.environ:
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(
                config_file=str(path) if path else None, context=context, client_configuration=cfg
            )
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        detail = " ".join(str(exc).split())  # YAML errors span lines: the CLI prints one
        raise ValueError(f"cannot load kubeconfig {path or '(default)'}: {detail}") from exc
    headers = {}
    token = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
    if token:
        prefix = cfg.api_key_prefix.get("authorization", "")
        headers["Authorization"] = f"{prefix} {token}".strip() if not token.startswith("Bearer ") else token
    verify: bool | str = (cfg.ssl_ca_cert or True) if cfg.verify_ssl else False
    cert = (cfg.cert_file, cfg.key_file) if cfg.cert_file and cfg.key_file else None
    return KubeConnection(server=cfg.host, headers=headers, verify=verify, cert=cert)
