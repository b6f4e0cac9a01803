"""FakeKubernetesApi: a local HTTP stand-in for the API server, serving JSON objects by path."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


class FakeKubernetesApi:
    """``objects[path] = json``; list paths filter ``items`` by ``fieldSelector=spec.nodeName=...``."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.requests: list[str] = []
        self.fail_with: int | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                url = urlsplit(self.path)
                fake.requests.append(self.path)
                if fake.fail_with is not None:
                    self._send(fake.fail_with, {"kind": "Status"})
                    return
                obj = fake.objects.get(url.path)
                if obj is None:
                    self._send(404, {"kind": "Status", "reason": "NotFound"})
                    return
                selector = parse_qs(url.query).get("fieldSelector", [""])[0]
                if selector.startswith("spec.nodeName=") and "items" in obj:
                    node = selector.split("=", 1)[1]
                    obj = {**obj, "items": [i for i in obj["items"] if i.get("spec", {}).get("nodeName") == node]}
                self._send(200, obj)

            def _send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def __enter__(self) -> FakeKubernetesApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add_pod(self, namespace: str, name: str, node: str, *, labels: dict[str, str] | None = None,
                uid: str = "", owner: tuple[str, str] | None = None, phase: str = "Running") -> None:
        pods = self.objects.setdefault("/api/v1/pods", {"kind": "PodList", "items": []})
        meta: dict[str, Any] = {"namespace": namespace, "name": name, "uid": uid or f"uid-{name}",
                                "labels": labels or {}}
        if owner:
            meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
        pods["items"].append({"metadata": meta, "spec": {"nodeName": node}, "status": {"phase": phase}})

    def add_namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        self.objects[f"/api/v1/namespaces/{name}"] = {"metadata": {"name": name, "labels": labels or {}}}

    def add_owner(self, path: str, owner: tuple[str, str]) -> None:
        self.objects[path] = {"metadata": {"ownerReferences": [
            {"kind": owner[0], "name": owner[1], "controller": True}]}}
