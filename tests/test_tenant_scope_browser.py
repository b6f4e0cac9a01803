"""Real browser, real headers: `gpulens dashboard` with access options behind a local header-setting proxy.

The proxy (tests/support/header_proxy.py) stands where oauth2-proxy stands in deploy/overlays/oauth2-proxy;
Streamlit reads its headers with ``st.context.headers``. Skips loudly without Chromium, fails under CI=true.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.exporter import stop_process
from tests.support.header_proxy import header_proxy, rewrite_head
from tests.support.headless_chromium import chromium_path
from tests.support.prometheus import free_port
from tests.support.report_store import build_store
from tests.support.streamlit_app import wait_healthy
from tests.support.tenant_names import leaks
from tests.test_browser_screenshots import _keep, _load_until

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def app_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    chromium_path()
    tmp = tmp_path_factory.mktemp("scoped")
    store = build_store(tmp / "gpulens.duckdb")
    access = tmp / "access.yaml"
    access.write_text("admin_groups: [platform]\ngroups:\n  team-nlp: [nlp]\n", encoding="utf-8")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulens.cli", "dashboard", "--db", str(store), "--port", str(port),
         "--trusted-user-header", "X-Forwarded-Email", "--trusted-groups-header", "X-Forwarded-Groups",
         "--access-file", str(access)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        yield port
    finally:
        stop_process(proc)


def test_a_request_without_the_proxys_headers_gets_no_access(app_port: int, tmp_path: Path) -> None:
    dom = _load_until(f"http://127.0.0.1:{app_port}/", tmp_path, "the request carries no X-Forwarded-Email header")
    assert "No access" in dom
    assert leaks(dom, "") == []


def test_a_team_behind_the_proxy_sees_its_tenant_only(app_port: int, tmp_path: Path) -> None:
    headers = {"X-Forwarded-Email": "dev@example.com", "X-Forwarded-Groups": "team-nlp"}
    with header_proxy(app_port, headers) as url:
        shot = tmp_path / "scoped.png"
        dom = _load_until(f"{url}/tenants", tmp_path, "Tenant: nlp", screenshot=shot)
    assert "Showing tenant: nlp" in dom
    assert leaks(dom, "nlp") == []
    _keep(shot, "streamlit-tenant-scoped.png")


def test_the_proxy_replaces_headers_a_client_sent() -> None:
    head = b"GET / HTTP/1.1\r\nHost: x\r\nx-forwarded-groups: platform"
    rewritten = rewrite_head(head, {"X-Forwarded-Groups": "team-nlp"})
    assert rewritten == b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-Groups: team-nlp\r\n\r\n"


@pytest.fixture(scope="module")
def proxied_app_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The app with the proxy named: only connections from 127.0.0.2 may carry the identity headers."""
    chromium_path()
    tmp = tmp_path_factory.mktemp("proxied")
    store = build_store(tmp / "gpulens.duckdb")
    access = tmp / "access.yaml"
    access.write_text("admin_groups: [platform-team]\ngroups:\n  team-nlp: [nlp]\n", encoding="utf-8")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulens.cli", "dashboard", "--db", str(store), "--port", str(port),
         "--trusted-user-header", "X-Forwarded-Email", "--trusted-groups-header", "X-Forwarded-Groups",
         "--access-file", str(access), "--trusted-proxy", "127.0.0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        yield port
    finally:
        stop_process(proc)


ADMIN_HEADERS = {"X-Forwarded-Email": "mallory@example.com", "X-Forwarded-Groups": "platform-team"}


def test_admin_headers_from_a_peer_that_is_not_the_named_proxy_are_ignored(proxied_app_port: int,
                                                                            tmp_path: Path) -> None:
    with header_proxy(proxied_app_port, ADMIN_HEADERS, source="127.0.0.3") as url:
        dom = _load_until(f"{url}/", tmp_path, "did not come through the trusted proxy")
    assert "No access" in dom
    assert leaks(dom, "") == []


def test_the_headers_from_the_named_proxy_are_honoured(proxied_app_port: int, tmp_path: Path) -> None:
    headers = {"X-Forwarded-Email": "dev@example.com", "X-Forwarded-Groups": "team-nlp"}
    with header_proxy(proxied_app_port, headers, source="127.0.0.2") as url:
        dom = _load_until(f"{url}/tenants", tmp_path, "Showing tenant: nlp")
    assert leaks(dom, "nlp") == []
