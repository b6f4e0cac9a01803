"""The one Kubernetes API client of gpulens: GET, server-side apply, merge patch and DELETE over HTTP, typed errors.

Everything that talks to an API server (the exporter's tenant and DRA lookups, the collector's
inventory, the quota writers) goes through :class:`KubernetesClient`; readers depend only on the
:class:`KubernetesReads` protocol (one ``get``). Server-side apply is a ``PATCH`` with content type
``application/apply-patch+yaml``, field manager ``gpulens`` and optionally ``force=true``; a JSON merge
patch carries a whole atomic list with the object's ``resourceVersion``; only the writers call them
(the exporter and the collector never write). Every way a request can go wrong becomes
a :class:`KubernetesApiError` (typed for 409, 403, 404; no answer in time; not reachable; an answer that
is not a JSON object), so a caller can fall back on 404, explain a 403, retry a 409 and give every
object an outcome instead of stopping at the first surprise. No ``httpx`` exception leaves this module,
and a ``KubernetesApiError`` is a ``UserError``: one that no caller handles is still one line at the CLI.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from gpulens.core.errors import UserError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
APPLY_PATCH_CONTENT_TYPE = "application/apply-patch+yaml"
MERGE_PATCH_CONTENT_TYPE = "application/merge-patch+json"
FIELD_MANAGER = "gpulens"
MAX_MESSAGE = 300
"""Longest error text kept from an answer (a proxy's error page can be kilobytes)."""


def segment(name: str) -> str:
    """One URL path segment: names come from pods, labels and the store, so ``/``, ``..`` or ``?`` must
    not steer the request."""
    return quote(name, safe="") if name not in (".", "..") else name.replace(".", "%2E")


class KubernetesApiError(UserError):
    """A request failed: an error status, or (``status`` 0) no usable answer at all."""

    def __init__(self, status: int, method: str, path: str, message: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {message}" if status else f"{method} {path}: {message}")
        self.status = status
        self.method = method
        self.path = path
        self.message = message


class ConflictError(KubernetesApiError):
    """409: the object changed since it was read (or a field-manager conflict)."""


class ForbiddenError(KubernetesApiError):
    """403: the caller's RBAC does not allow the request."""


class NotFoundError(KubernetesApiError):
    """404."""


class NoAnswerError(KubernetesApiError):
    """No answer within the timeout: a write may or may not have been applied."""


class UnreachableError(KubernetesApiError):
    """The connection failed (refused, reset, TLS, DNS): the request was not processed."""


class MalformedAnswerError(KubernetesApiError):
    """A success status whose body is not a JSON object (a proxy's HTML page, a truncated body)."""


_ERRORS: dict[int, type[KubernetesApiError]] = {404: NotFoundError, 403: ForbiddenError, 409: ConflictError}


class KubernetesReads(Protocol):
    """The read side every reader depends on (the exporter's lookups, the collector's inventory)."""

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        """GET ``path`` (e.g. ``/api/v1/namespaces/x``) and return the decoded JSON object."""
        ...


@dataclass(frozen=True)
class KubeConnection:
    """Where the API server is and how to authenticate."""

    server: str
    headers: Mapping[str, str] = field(default_factory=dict)
    verify: bool | str = True
    cert: tuple[str, str] | None = None


def _tls(connection: KubeConnection) -> bool | ssl.SSLContext:
    """What httpx verifies the server with: a context holding the CA file and client certificate, or a bool."""
    if isinstance(connection.verify, bool) and connection.cert is None:
        return connection.verify
    if connection.verify is False:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=connection.verify if isinstance(connection.verify, str) else None)
    if connection.cert is not None:
        context.load_cert_chain(*connection.cert)
    return context


class KubernetesClient:
    """GET and server-side apply against one API server; one HTTP client reused."""

    def __init__(self, connection: KubeConnection | str, *, timeout_s: float = 30.0) -> None:
        if isinstance(connection, str):
            connection = KubeConnection(connection)
        self.server = connection.server
        self.timeout_s = timeout_s
        try:
            self._client = httpx.Client(
                base_url=connection.server.rstrip("/"), headers=dict(connection.headers),
                verify=_tls(connection), timeout=timeout_s,
            )
        except (OSError, ValueError, httpx.InvalidURL) as exc:  # CA or client certificate missing or unusable
            detail = getattr(exc, "strerror", None) or exc
            raise UnreachableError(0, "connect", connection.server,
                                   f"cannot use the TLS files of the connection ({detail})") from exc

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> KubernetesClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        return self._send("GET", path, params=dict(params or {}), headers={"Accept": "application/json"})

    def apply(self, path: str, body: Mapping[str, Any], *, force: bool) -> dict[str, Any]:
        """Server-side apply ``body`` (JSON is valid YAML) as field manager ``gpulens``."""
        params = {"fieldManager": FIELD_MANAGER}
        if force:
            params["force"] = "true"
        return self._send(
            "PATCH", path, params=params, content=json.dumps(body, sort_keys=True),
            headers={"Content-Type": APPLY_PATCH_CONTENT_TYPE, "Accept": "application/json"},
        )

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """JSON merge patch (RFC 7386) as field manager ``gpulens``: for read-modify-write of atomic lists
        (``Node.spec.taints``), with ``metadata.resourceVersion`` in ``body`` as the precondition."""
        return self._send(
            "PATCH", path, params={"fieldManager": FIELD_MANAGER}, content=json.dumps(body, sort_keys=True),
            headers={"Content-Type": MERGE_PATCH_CONTENT_TYPE, "Accept": "application/json"},
        )

    def delete(self, path: str) -> dict[str, Any]:
        """DELETE ``path`` (the API server answers a Status or the deleted object)."""
        return self._send("DELETE", path, headers={"Accept": "application/json"})

    def _send(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            maybe = "; the change may or may not have been applied" if method != "GET" else ""
            raise NoAnswerError(0, method, path, f"no answer within {self.timeout_s:g} s{maybe}") from exc
        except httpx.TransportError as exc:
            raise UnreachableError(0, method, path, f"cannot reach the API server {self.server}: {exc}") from exc
        except httpx.DecodingError as exc:
            maybe = "; the change may have been applied" if method != "GET" else ""
            raise MalformedAnswerError(0, method, path, f"the answer cannot be decoded: {exc}{maybe}") from exc
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:  # redirect loops, a bad path
            raise UnreachableError(0, method, path, f"cannot send the request to {self.server}: {exc}") from exc
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
        raise _ERRORS.get(response.status_code, KubernetesApiError)(response.status_code, method, path, message)


def in_cluster_connection() -> KubeConnection | None:
    """The API server of the pod's own cluster (service account token and CA), or ``None`` outside one.

    Light on purpose: the exporter runs on every GPU node and does not load the ``kubernetes`` package.
    """
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    token_file = SERVICE_ACCOUNT / "token"
    if not host or not token_file.exists():
        return None
    host = f"[{host}]" if ":" in host else host
    return KubeConnection(f"https://{host}:{port}",
                          headers={"Authorization": f"Bearer {token_file.read_text().strip()}"},
                          verify=str(SERVICE_ACCOUNT / "ca.crt"))


def connection_from_kubeconfig(path: Path | None = None, context: str | None = None) -> KubeConnection:
    """Read a kubeconfig (``path``, else ``$KUBECONFIG`` or ``~/.kube/config``; in a pod, the service
    account); ``UserError`` naming the file when it cannot be loaded."""
    import yaml
    from kubernetes import client, config  # heavy import, only for commands that take --kubeconfig
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
        raise UserError(f"cannot load kubeconfig {path or '(default)'}: {detail}") from exc
    headers = {}
    token = cfg.api_key.get("authorization") or cfg.api_key.get("BearerToken")
    if token:
        prefix = cfg.api_key_prefix.get("authorization", "")
        headers["Authorization"] = f"{prefix} {token}".strip() if not token.startswith("Bearer ") else token
    verify: bool | str = (cfg.ssl_ca_cert or True) if cfg.verify_ssl else False
    cert = (cfg.cert_file, cfg.key_file) if cfg.cert_file and cfg.key_file else None
    return KubeConnection(server=cfg.host, headers=headers, verify=verify, cert=cert)
