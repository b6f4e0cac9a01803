"""FakeKubernetesWriteApi: a local HTTP stand-in of the Kubernetes API server that records every request.

It stores objects by URL path, answers GET, and implements enough of server-side apply for the
writers: ``PATCH`` with ``application/apply-patch+yaml`` merges the body into the stored object (maps
merge, lists replace), creates missing objects, checks ``metadata.resourceVersion`` (409 on mismatch)
and bumps it. ``/status`` paths write the status of the parent object. Failures can be scripted.
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


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


def _merge(into: dict[str, Any], patch: dict[str, Any]) -> None:
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


class FakeKubernetesWriteApi:
    """Run with ``with FakeKubernetesWriteApi() as api:``; ``api.url`` is the server address."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[RecordedRequest] = []
        self._failures: dict[tuple[str, str], deque[tuple[int, str]]] = {}
        self._version = 100
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeKubernetesWriteApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def put(self, path: str, obj: dict[str, Any]) -> None:
        """Store an object as if someone else had created it."""
        with self._lock:
            stored = copy.deepcopy(obj)
            stored.setdefault("metadata", {})["resourceVersion"] = self._next_version()
            self.objects[path] = stored

    def fail(self, method: str, path: str, status: int, message: str = "", times: int = 1) -> None:
        """Answer the next ``times`` ``method`` requests on ``path`` with ``status``."""
        queue = self._failures.setdefault((method, path), deque())
        queue.extend([(status, message or f"scripted {status}")] * times)

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

    def _next_version(self) -> str:
        self._version += 1
        return str(self._version)

    def _handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        parts = urlsplit(raw_path)
        path, query = parts.path, {k: v[-1] for k, v in parse_qs(parts.query).items()}
        parsed = yaml.safe_load(body.decode()) if body else None
        with self._lock:
            self.requests.append(RecordedRequest(method, path, query, headers, parsed))
            queue = self._failures.get((method, path))
            if queue:
                status, message = queue.popleft()
                return status, {"kind": "Status", "status": "Failure", "message": message, "code": status}
            is_status = path.endswith("/status")
            key = path.removesuffix("/status") if is_status else path
            if method == "GET":
                if key not in self.objects:
                    return 404, {"kind": "Status", "message": f"{path} not found", "code": 404}
                return 200, self.objects[key]
            if method != "PATCH":
                return 405, {"kind": "Status", "message": "method not allowed", "code": 405}
            if headers.get("content-type") != "application/apply-patch+yaml":
                return 415, {"kind": "Status", "message": "expected an apply patch", "code": 415}
            if "fieldManager" not in query:
                return 422, {"kind": "Status", "message": "fieldManager is required for apply", "code": 422}
            assert isinstance(parsed, dict)
            stored = self.objects.get(key)
            wanted = parsed.get("metadata", {}).get("resourceVersion")
            if stored is not None and wanted and wanted != stored["metadata"]["resourceVersion"]:
                return 409, {"kind": "Status", "message": "the object has been modified", "code": 409}
            if stored is None:
                if is_status:
                    return 404, {"kind": "Status", "message": f"{key} not found", "code": 404}
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
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

        return Handler
