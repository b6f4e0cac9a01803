"""FakeKubernetesApi: a local HTTP stand-in of the Kubernetes API server that records every request.

Objects are stored by URL path. ``GET`` answers the stored object; a list object (one with ``items``)
is filtered by ``fieldSelector=spec.nodeName=<node>``. ``PATCH`` with ``application/apply-patch+yaml``
is enough of server-side apply for the quota writers: the body merges into the stored object (maps
merge, lists replace), a missing object is created, ``metadata.resourceVersion`` is checked (409 on a
mismatch) and bumped, and a ``/status`` path writes the status of its parent object.

Failures are scripted per method and path: an HTTP status (409, 403, 500...), an answer that is not
JSON (a proxy's HTML page, with any status), or a hang that holds the answer back, so clients see their
timeout. Every request, scripted or not, lands in ``requests``.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

ANY = "*"
"""Matches every method or every path in :meth:`FakeKubernetesApi.fail` and :meth:`FakeKubernetesApi.hang`."""


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it: headers lower-cased, query values decoded, body parsed."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class _Script:
    status: int
    message: str
    hang_seconds: float
    remaining: int | None
    """Requests left to answer this way; None: every one."""
    raw: bytes | None = None
    """Send these bytes (with ``content_type``) instead of a JSON Status."""
    content_type: str = "application/json"
    land_first: bool = False
    """With ``hang_seconds``: handle the request first, then hold its answer back (a write that landed)."""


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


def _status(code: int, message: str, reason: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                            "code": code}
    if reason:
        body["reason"] = reason
    return body


class FakeKubernetesApi:
    """Run with ``with FakeKubernetesApi() as api:``; ``api.url`` is the server address."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.requests: list[RecordedRequest] = []
        self._scripts: dict[tuple[str, str], deque[_Script]] = {}
        self._version = 100
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeKubernetesApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()  # releases hung requests
        self._server.shutdown()
        self._server.server_close()

    # -- state ---------------------------------------------------------------------------------------

    def put(self, path: str, obj: dict[str, Any]) -> None:
        """Store an object as if someone else had created it (with a fresh ``resourceVersion``)."""
        with self._lock:
            stored = copy.deepcopy(obj)
            stored.setdefault("metadata", {})["resourceVersion"] = self._next_version()
            self.objects[path] = stored

    def add_pod(self, namespace: str, name: str, node: str, *, labels: dict[str, str] | None = None,
                uid: str = "", owner: tuple[str, str] | None = None, phase: str = "Running") -> None:
        """Append a pod to the cluster-wide pod list ``/api/v1/pods``."""
        pods = self.objects.setdefault("/api/v1/pods", {"kind": "PodList", "items": []})
        meta: dict[str, Any] = {"namespace": namespace, "name": name, "uid": uid or f"uid-{name}",
                                "labels": labels or {}}
        if owner:
            meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
        pods["items"].append({"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}})

    def add_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        self.objects[f"/api/v1/namespaces/{name}"] = {"metadata": {"name": name, "labels": labels or {}}}

    def add_owner(self, path: str, owner: tuple[str, str]) -> None:
        """An object at ``path`` (a ReplicaSet, a Job) controlled by ``owner`` (kind, name)."""
        self.objects[path] = {"metadata": {"ownerReferences": [
            {"kind": owner[0], "name": owner[1], "controller": True}]}}

    # -- scripted failures -----------------------------------------------------------------------------

    def fail(self, method: str, path: str, status: int, message: str = "", times: int | None = 1) -> None:
        """Answer the next ``times`` ``method`` requests on ``path`` with ``status`` (``None``: every one).

        ``method`` and ``path`` may be :data:`ANY`.
        """
        self._script(method, path, _Script(status, message or f"scripted {status}", 0.0, times))

    def answer_raw(self, method: str, path: str, body: bytes, *, status: int = 200,
                   content_type: str = "text/html", times: int | None = 1) -> None:
        """Answer the next ``times`` matching requests with ``body`` as is (not JSON), doing nothing else."""
        self._script(method, path, _Script(status, "", 0.0, times, raw=body, content_type=content_type))

    def hang(self, method: str, path: str, seconds: float, times: int | None = 1, *, land_first: bool = False) -> None:
        """Hold the answer to the next ``times`` matching requests back for ``seconds`` (or until exit).

        With ``land_first`` the request is handled at once (a write lands) and only its answer is held back.
        """
        self._script(method, path, _Script(0, "", seconds, times, land_first=land_first))

    def _script(self, method: str, path: str, script: _Script) -> None:
        with self._lock:
            self._scripts.setdefault((method, path), deque()).append(script)

    def _scripted(self, method: str, path: str) -> _Script | None:
        """The first script matching the request, used up once (caller holds the lock)."""
        for key in ((method, path), (method, ANY), (ANY, path), (ANY, ANY)):
            queue = self._scripts.get(key)
            if queue:
                script = queue[0]
                if script.remaining is not None:
                    script.remaining -= 1
                    if script.remaining <= 0:
                        queue.popleft()
                return script
        return None

    # -- helpers for tests -----------------------------------------------------------------------------

    def kubeconfig(self, directory: Path, token: str = "test-token") -> Path:
        """Write a kubeconfig pointing at this server."""
        path = directory / "kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))
        return path

    def requests_to(self, method: str, path_prefix: str = "") -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == method and r.path.startswith(path_prefix)]

    # -- serving ---------------------------------------------------------------------------------------

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        """(status, JSON payload), or (status, (content type, raw bytes)) for a scripted raw answer."""
        parts = urlsplit(raw_path)
        path, query = parts.path, {k: v[-1] for k, v in parse_qs(parts.query).items()}
        parsed = yaml.safe_load(body.decode()) if body else None
        with self._lock:
            self.requests.append(RecordedRequest(method, path, query, headers, parsed))
            script = self._scripted(method, path)
        if script is not None and script.hang_seconds and script.land_first:
            with self._lock:
                answer = self._get(path, query) if method == "GET" else self._apply(path, query, headers, parsed)
            self._closing.wait(script.hang_seconds)
            return answer
        if script is not None and script.hang_seconds:
            self._closing.wait(script.hang_seconds)
        elif script is not None and script.raw is not None:
            return script.status, (script.content_type, script.raw)
        elif script is not None:
            return script.status, _status(script.status, script.message)
        with self._lock:
            if method == "GET":
                return self._get(path, query)
            if method != "PATCH":
                return 405, _status(405, "method not allowed", "MethodNotAllowed")
            return self._apply(path, query, headers, parsed)

    def _get(self, path: str, query: dict[str, str]) -> tuple[int, Any]:
        is_status = path.endswith("/status")
        obj = self.objects.get(path.removesuffix("/status") if is_status else path)
        if obj is None:
            return 404, _status(404, f"{path} not found", "NotFound")
        selector = query.get("fieldSelector", "")
        if selector.startswith("spec.nodeName=") and "items" in obj:
            node = selector.split("=", 1)[1]
            obj = {**obj, "items": [i for i in obj["items"] if i.get("spec", {}).get("nodeName") == node]}
        return 200, obj

    def _apply(self, path: str, query: dict[str, str], headers: dict[str, str], parsed: Any) -> tuple[int, Any]:
        if headers.get("content-type") != "application/apply-patch+yaml":
            return 415, _status(415, "expected an apply patch")
        if "fieldManager" not in query:
            return 422, _status(422, "fieldManager is required for apply")
        assert isinstance(parsed, dict)
        is_status = path.endswith("/status")
        key = path.removesuffix("/status") if is_status else path
        stored = self.objects.get(key)
        wanted = parsed.get("metadata", {}).get("resourceVersion")
        if stored is not None and wanted and wanted != stored["metadata"]["resourceVersion"]:
            return 409, _status(409, "the object has been modified", "Conflict")
        if stored is None:
            if is_status:
                return 404, _status(404, f"{key} not found", "NotFound")
            stored = self.objects[key] = {}
        patch = {"status": parsed.get("status", {})} if is_status else {
            k: v for k, v in parsed.items() if k != "status"
        }
        _merge(stored, patch)
        stored.setdefault("metadata", {})["resourceVersion"] = self._next_version()
        return 200, stored

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, payload = fake._handle(self.command, self.path, headers, body)
                if isinstance(payload, tuple):
                    content_type, data = payload
                else:
                    content_type, data = "application/json", json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up (a hang outlived its timeout)
                    pass

            do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                pass

        return Handler
