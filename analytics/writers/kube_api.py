"""A thin Kubernetes API client for the writers: GET and server-side apply over HTTP, nothing else.

Server-side apply is a ``PATCH`` with content type ``application/apply-patch+yaml``, a field manager and
optionally ``force=true``; the body is the object with only the fields we own. Every way a request can
go wrong becomes a ``KubeApiError`` (typed for 409, 403, 404; no answer in time; not reachable; an
answer that is not a JSON object), so the applier can retry on 409, explain a 403 and give every
object an outcome instead of stopping at the first surprise.
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
MAX_MESSAGE = 300
"""Longest error text kept from an answer (a proxy's error page can be kilobytes)."""


class KubeApiError(Exception):
    """A request failed: an error status, or (``status`` 0) no usable answer at all."""

    def __init__(self, status: int, method: str, path: str, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}" if status else f"{method} {path}: {message}")
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


class NoAnswerError(KubeApiError):
    """No answer within the timeout: a write may or may not have been applied."""


class UnreachableError(KubeApiError):
    """The connection failed (refused, reset, TLS, DNS): the request was not processed."""


class MalformedAnswerError(KubeApiError):
    """A success status whose body is not a JSON object (a proxy's HTML page, a truncated body)."""


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
        self.server = connection.server
        self.timeout_s = timeout_s
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
        return self._send("GET", path, headers={"Accept": "application/json"})

    def apply(self, path: str, body: Mapping[str, Any], *, force: bool) -> dict[str, Any]:
        """Server-side apply ``body`` (JSON is valid YAML) as field manager ``gpulens``."""
        params = {"fieldManager": FIELD_MANAGER}
        if force:
            params["force"] = "true"
        return self._send(
            "PATCH", path, params=params, content=json.dumps(body, sort_keys=True),
            headers={"Content-Type": APPLY_PATCH_CONTENT_TYPE, "Accept": "application/json"},
        )

    def _send(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            maybe = "; the change may or may not have been applied" if method != "GET" else ""
            raise NoAnswerError(0, method, path, f"no answer within {self.timeout_s:g} s{maybe}") from exc
        except httpx.TransportError as exc:
            raise UnreachableError(0, method, path, f"cannot reach the API server {self.server}: {exc}") from exc
        return self._check(method, path, response)

    @staticmethod
    def _check(method: str, path: str, response: httpx.Response) -> dict[str, Any]:
        if response.status_code < 400:
            try:
                data = response.json()
            except ValueError:
                data = None
            if not isinstance(data, dict):
                kind = response.headers.get("content-type", "no content type")
                maybe = "; the change may have been applied" if method != "GET" else ""
                raise MalformedAnswerError(
                    0, method, path, f"HTTP {response.status_code} answer is not a JSON object ({kind}){maybe}")
            return data
        try:
            message = str(response.json().get("message", response.text))
        except (ValueError, AttributeError):
            message = response.text.strip() or response.reason_phrase
        message = " ".join(message.split())  # an HTML error page spans lines: the outcome table shows one
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 3] + "..."
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
