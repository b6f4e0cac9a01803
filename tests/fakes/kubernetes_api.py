"""FakeKubernetesApi: a local HTTP stand-in of the Kubernetes API server that records every request.

Objects are stored by URL path. ``GET`` answers the stored object; a collection path with no stored
list (``/api/v1/nodes``, ``/apis/<group>/<version>/<resource>``, cluster-wide or per namespace) answers
the objects stored under it; either kind of list is filtered by ``fieldSelector=spec.nodeName=<node>``
or ``metadata.name=<name>`` and by an equality ``labelSelector`` (``a=b,c``).

Writes merge lists as the real API server does (:mod:`tests.fakes.kubernetes_lists`: each list by its
OpenAPI ``x-kubernetes-list-type``, ``Node.spec.taints`` atomic), with field ownership per manager:

- ``PATCH`` ``application/apply-patch+yaml``: server-side apply (``fieldManager`` required; a conflict
  without ``force`` is a 409; fields this manager applied before and leaves out are removed unless
  another manager owns them); a missing object is created.
- ``PATCH`` ``application/merge-patch+json``: JSON merge patch (RFC 7386); 404 on a missing object.
- ``PUT``: update, the body replaces the object (its status stays; ``/status`` replaces only status).
- ``DELETE``: removes the object.
- ``application/strategic-merge-patch+json`` is not modelled: 415, so no test relies on it by accident.

Every write checks a ``metadata.resourceVersion`` it carries (409 on a mismatch) and bumps it; a
``/status`` path writes the status of its parent object. Objects stored with :meth:`put` belong to the
manager ``before-gpulens`` (someone else created them).

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

from tests.fakes import kubernetes_lists as lists

ANY = "*"
OTHER_MANAGER = "before-gpulens"
"""The field manager that owns what :meth:`FakeKubernetesApi.put` stored."""
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


def _well_formed(item: Any) -> bool:
    """Whether a list item is an object whose metadata, labels and spec are objects (as a real server's are)."""
    if not isinstance(item, dict):
        return False
    meta = item.get("metadata") or {}
    return isinstance(meta, dict) and isinstance(meta.get("labels") or {}, dict) and isinstance(item.get("spec") or {}, dict)


def _selected(item: Any, query: dict[str, str]) -> bool:
    """Whether a list item matches ``fieldSelector`` (``spec.nodeName``, ``metadata.name``) and an equality
    ``labelSelector`` (``a=b,c``: label a is b and label c exists)."""
    field = query.get("fieldSelector", "")
    if field:
        name, _, want = field.partition("=")
        where = {"spec.nodeName": (item.get("spec") or {}).get("nodeName"),
                 "metadata.name": (item.get("metadata") or {}).get("name")}
        if name in where and where[name] != want:
            return False
    labels = (item.get("metadata") or {}).get("labels") or {}
    for term in filter(None, query.get("labelSelector", "").split(",")):
        key, eq, want = term.partition("=")
        if (eq and labels.get(key) != want) or (not eq and key not in labels):
            return False
    return True


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
        self.managers: dict[str, dict[str, set[lists.Path]]] = {}
        """Per object path: field manager (``name``, or ``name/status``) -> the fields it owns."""
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
            self.managers[path] = {}
            lists.take_changed({}, stored, self.managers[path], OTHER_MANAGER)

    def serve_api_group(self, group: str, resources: dict[str, list[str]]) -> None:
        """Discovery of ``group``: ``/apis/<group>`` (the first version preferred) and each version's resources."""
        versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in resources]
        self.objects[f"/apis/{group}"] = {"kind": "APIGroup", "apiVersion": "v1", "name": group,
                                          "versions": versions, "preferredVersion": versions[0]}
        for version, names in resources.items():
            self.objects[f"/apis/{group}/{version}"] = {
                "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
                "resources": [{"name": n, "namespaced": False, "kind": n} for n in names]}

    def add_pod(self, namespace: str, name: str, node: str, *, labels: dict[str, str] | None = None,
                uid: str = "", owner: tuple[str, str] | None = None, phase: str = "Running",
                annotations: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> None:
        """Append a pod to the cluster-wide pod list ``/api/v1/pods`` (``limits``: its one container's)."""
        pods = self.objects.setdefault("/api/v1/pods", {"kind": "PodList", "items": []})
        meta: dict[str, Any] = {"namespace": namespace, "name": name, "uid": uid or f"uid-{name}",
                                "labels": labels or {}}
        if annotations:
            meta["annotations"] = annotations
        if owner:
            meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
        spec: dict[str, Any] = {"nodeName": node}
        if limits:
            spec["containers"] = [{"name": "main", "resources": {"limits": limits}}]
        pods["items"].append({"metadata": meta, "spec": spec, "status": {"phase": phase}})

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
            if method == "DELETE":
                return self._delete(path)
            if method == "PUT":
                return self._update(path, query, parsed)
            if method != "PATCH":
                return 405, _status(405, "method not allowed", "MethodNotAllowed")
            if headers.get("content-type") == "application/merge-patch+json":
                return self._merge_patch(path, query, parsed)
            return self._apply(path, query, headers, parsed)

    def _get(self, path: str, query: dict[str, str]) -> tuple[int, Any]:
        is_status = path.endswith("/status")
        obj = self.objects.get(path.removesuffix("/status") if is_status else path)
        if obj is None:
            members = self._collection(path)
            if not members:
                return 404, _status(404, f"{path} not found", "NotFound")
            obj = {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": str(self._version)},
                   "items": members}
        if isinstance(obj.get("items"), list) and all(_well_formed(i) for i in obj["items"]):
            obj = {**obj, "items": [i for i in obj["items"] if _selected(i, query)]}
        # else: a list of the wrong shape, stored on purpose by a test, is served as it is
        return 200, obj

    def _collection(self, path: str) -> list[Any]:
        """The objects stored one level under ``path``, and, for a cluster-wide list of a namespaced
        resource, those under ``.../namespaces/<ns>/<resource>/``."""
        parts = path.rstrip("/").split("/")
        base, resource = "/".join(parts[:-1]), parts[-1]
        out = []
        for key in sorted(self.objects):
            rest = key.split("/")
            if key.startswith(path.rstrip("/") + "/") and len(rest) == len(parts) + 1:
                out.append(self.objects[key])
            elif (key.startswith(base + "/namespaces/") and len(rest) == len(parts) + 3
                  and rest[len(parts) + 1] == resource):
                out.append(self.objects[key])
        return out

    def _precondition(self, stored: dict[str, Any] | None, parsed: Any) -> tuple[int, Any] | None:
        wanted = (parsed or {}).get("metadata", {}).get("resourceVersion") if isinstance(parsed, dict) else None
        if stored is not None and wanted and wanted != stored.get("metadata", {}).get("resourceVersion"):
            return 409, _status(409, "the object has been modified; please apply your changes to the latest "
                                     "version and try again", "Conflict")
        return None

    def _apply(self, path: str, query: dict[str, str], headers: dict[str, str], parsed: Any) -> tuple[int, Any]:
        if headers.get("content-type") != "application/apply-patch+yaml":
            return 415, _status(415, f"{headers.get('content-type')} is not modelled by the fake", "UnsupportedMediaType")
        if "fieldManager" not in query:
            return 422, _status(422, "fieldManager is required for apply")
        assert isinstance(parsed, dict)
        is_status = path.endswith("/status")
        key = path.removesuffix("/status") if is_status else path
        stored = self.objects.get(key)
        refused = self._precondition(stored, parsed)
        if refused:
            return refused
        if stored is None:
            if is_status:
                return 404, _status(404, f"{key} not found", "NotFound")
            stored = self.objects[key] = {}
            self.managers[key] = {}
        patch = {"status": parsed.get("status", {})} if is_status else {
            k: v for k, v in parsed.items() if k != "status"
        }
        manager = query["fieldManager"] + ("/status" if is_status else "")
        try:
            lists.apply(stored, patch, self.managers.setdefault(key, {}), manager,
                        force=query.get("force") == "true")
        except lists.Conflict as exc:
            return 409, _status(409, f"Apply failed: {exc}", "Conflict")
        stored.setdefault("metadata", {})["resourceVersion"] = self._next_version()
        return 200, stored

    def _merge_patch(self, path: str, query: dict[str, str], parsed: Any) -> tuple[int, Any]:
        is_status = path.endswith("/status")
        key = path.removesuffix("/status") if is_status else path
        stored = self.objects.get(key)
        if stored is None:
            return 404, _status(404, f"{key} not found", "NotFound")
        refused = self._precondition(stored, parsed)
        if refused:
            return refused
        if is_status:
            parsed = {"status": (parsed or {}).get("status")}
        else:
            parsed = {k: v for k, v in (parsed or {}).items() if k != "status"}
        return self._replace(key, stored, lists.merge_patch(stored, parsed), query, is_status)

    def _update(self, path: str, query: dict[str, str], parsed: Any) -> tuple[int, Any]:
        is_status = path.endswith("/status")
        key = path.removesuffix("/status") if is_status else path
        stored = self.objects.get(key)
        if stored is None:
            return 404, _status(404, f"{key} not found", "NotFound")
        if not isinstance(parsed, dict) or not parsed.get("metadata", {}).get("resourceVersion"):
            return 422, _status(422, "metadata.resourceVersion: must be specified for an update", "Invalid")
        refused = self._precondition(stored, parsed)
        if refused:
            return refused
        if is_status:
            after = {**copy.deepcopy(stored), "status": copy.deepcopy(parsed.get("status"))}
        else:
            after = {k: copy.deepcopy(v) for k, v in parsed.items() if k != "status"}
            if "status" in stored:
                after["status"] = copy.deepcopy(stored["status"])
        return self._replace(key, stored, after, query, is_status)

    def _replace(self, key: str, stored: dict[str, Any], after: dict[str, Any], query: dict[str, str],
                 is_status: bool) -> tuple[int, Any]:
        """Store ``after`` in place of ``stored`` (same dict, so lists that hold it stay true)."""
        manager = query.get("fieldManager", "unnamed-client") + ("/status" if is_status else "")
        before = copy.deepcopy(stored)
        stored.clear()
        stored.update(after)
        lists.take_changed(before, stored, self.managers.setdefault(key, {}), manager)
        stored.setdefault("metadata", {})["resourceVersion"] = self._next_version()
        return 200, stored

    def _delete(self, path: str) -> tuple[int, Any]:
        if self.objects.pop(path, None) is None:
            return 404, _status(404, f"{path} not found", "NotFound")
        self.managers.pop(path, None)
        return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200}

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
