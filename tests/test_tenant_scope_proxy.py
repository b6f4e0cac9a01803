"""Identity headers are trusted only from the proxy: refused on an open address, ignored from other peers.

`gpulens dashboard` refuses trusted headers on a non-loopback address unless --trusted-proxy (or
GPULENS_TRUSTED_PROXIES) names the proxy; the app then reads the headers only from requests whose peer
is that proxy. Under AppTest (no connection), a fake peer stands in at our boundary,
``support.request_peer``; tests/test_tenant_scope_browser.py drives the real peers (127.0.0.2, 127.0.0.3).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from streamlit import config
from streamlit.testing.v1 import AppTest

from dashboards.streamlit import support
from dashboards.streamlit.access import (
    ACCESS_FILE_ENV,
    GROUPS_HEADER_ENV,
    PROXIES_ENV,
    USER_HEADER_ENV,
    TrustedHeaders,
    decide,
    load_access_file,
    parse_proxies,
    require_safe_listen,
    trusted_headers_from,
)
from dashboards.streamlit.launch import DB_ENV, streamlit_command, streamlit_environment
from gpulens.core.errors import UserError
from tests.support.cli import ROOT, assert_one_line_error, gpulens
from tests.support.report_store import build_store
from tests.support.streamlit_app import fresh_caches  # noqa: F401 (an autouse fixture)
from tests.support.tenant_names import OWNED

APP = ROOT / "dashboards" / "streamlit" / "app.py"
ADMIN = {"X-Forwarded-Email": "mallory@example.com", "X-Forwarded-Groups": "platform-team"}
HEADER_FLAGS = ("--trusted-user-header", "X-Forwarded-Email", "--trusted-groups-header", "X-Forwarded-Groups")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("store") / "gpulens.duckdb")


@pytest.fixture
def access_file(tmp_path: Path) -> Path:
    path = tmp_path / "access.yaml"
    path.write_text("admin_groups: [platform-team]\ngroups:\n  team-nlp: [nlp]\n", encoding="utf-8")
    return path


def _trusted(access_file: Path, *proxies: str) -> TrustedHeaders:
    argv = [*HEADER_FLAGS, "--access-file", str(access_file), *(a for p in proxies for a in ("--trusted-proxy", p))]
    trusted = trusted_headers_from(argv, {})
    assert trusted is not None
    return trusted


# -- refusing to start ------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.5", "::", "dashboard.example.com"])
def test_the_dashboard_refuses_trusted_headers_on_a_non_loopback_address_without_a_named_proxy(
    store: Path, access_file: Path, host: str
) -> None:
    proc = gpulens("dashboard", "--db", str(store), "--host", host, *HEADER_FLAGS, "--access-file", str(access_file))
    assert_one_line_error(proc, f"--host {host}", "X-Forwarded-Groups", "--trusted-proxy")


def test_the_same_refusal_applies_when_the_headers_are_configured_through_the_environment(
    store: Path, access_file: Path
) -> None:
    env = {**os.environ, USER_HEADER_ENV: "X-Forwarded-Email", GROUPS_HEADER_ENV: "X-Forwarded-Groups",
           ACCESS_FILE_ENV: str(access_file)}
    proc = subprocess.run([sys.executable, "-m", "gpulens.cli", "dashboard", "--db", str(store), "--host", "0.0.0.0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert_one_line_error(proc, "--host 0.0.0.0", "--trusted-proxy", PROXIES_ENV)


def test_a_bad_trusted_proxy_address_is_a_one_line_error(store: Path, access_file: Path) -> None:
    proc = gpulens("dashboard", "--db", str(store), "--host", "0.0.0.0", *HEADER_FLAGS, "--access-file",
                   str(access_file), "--trusted-proxy", "oauth2-proxy")
    assert_one_line_error(proc, "invalid --trusted-proxy 'oauth2-proxy'", "10.0.0.0/24")


def test_a_trusted_proxy_without_the_header_options_is_refused() -> None:
    with pytest.raises(UserError, match="--trusted-proxy goes with --trusted-user-header"):
        trusted_headers_from(["--trusted-proxy", "10.0.0.5"], {})


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_a_loopback_address_needs_no_named_proxy(access_file: Path, host: str) -> None:
    require_safe_listen(host, _trusted(access_file))


def test_a_named_proxy_allows_any_address_and_travels_to_the_app_and_its_environment(access_file: Path,
                                                                                     store: Path) -> None:
    trusted = _trusted(access_file, "10.0.0.5", "10.1.0.0/16")
    require_safe_listen("0.0.0.0", trusted)
    argv = streamlit_command(store, port=8501, host="0.0.0.0", trusted=trusted)
    assert trusted_headers_from(argv[argv.index("--") + 1:], {}) == trusted
    # uvicorn must not replace a loopback peer by what an X-Forwarded-For header claims
    assert streamlit_environment({"FORWARDED_ALLOW_IPS": "*"}, trusted)["FORWARDED_ALLOW_IPS"] == ""
    assert streamlit_environment({"A": "b"}, _trusted(access_file)) == {"A": "b"}


def test_trusted_proxies_come_from_the_environment_comma_separated(access_file: Path) -> None:
    trusted = trusted_headers_from([], {USER_HEADER_ENV: "X-U", GROUPS_HEADER_ENV: "X-G",
                                        ACCESS_FILE_ENV: str(access_file), PROXIES_ENV: "10.0.0.5, fd00::/64"})
    assert trusted is not None and trusted.proxies == parse_proxies(["10.0.0.5", "fd00::/64"])


# -- the peer decides whether the headers are read -------------------------------------------------------


@pytest.mark.parametrize(("peer", "honoured"), [
    ("127.0.0.2", True),
    ("10.0.0.5", True),
    ("10.1.4.9", True),  # inside the CIDR
    ("::ffff:10.0.0.5", True),  # the proxy seen by a dual-stack listener
    ("127.0.0.3", False),
    ("10.0.0.6", False),
    (None, False),  # 127.0.0.1 / ::1: a local process is not the proxy
    ("not-an-address", False),
])
def test_headers_are_read_only_from_a_named_proxy(access_file: Path, peer: str | None, honoured: bool) -> None:
    trusted = _trusted(access_file, "127.0.0.2", "10.0.0.5", "10.1.0.0/16")
    decision = decide(ADMIN, trusted, load_access_file(access_file), peer)
    if honoured:
        assert decision.scope is not None and decision.scope.sees_all
    else:
        assert decision.scope is None and decision.user is None
        assert "did not come through the trusted proxy" in decision.reason


def test_a_loopback_proxy_is_recognised_although_streamlit_reports_no_address(access_file: Path) -> None:
    trusted = _trusted(access_file, "127.0.0.1")
    decision = decide(ADMIN, trusted, load_access_file(access_file), None)
    assert decision.scope is not None and decision.scope.sees_all


class FakePeer:
    """Fake of the connection's peer address (our boundary), as ``st.context.ip_address`` reports it."""

    def __init__(self) -> None:
        self.address: str | None = None

    def __call__(self) -> str | None:
        return self.address


@pytest.fixture
def app_env(store: Path, access_file: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePeer]:
    peer = FakePeer()
    monkeypatch.setattr(support, "request_peer", peer)
    monkeypatch.setattr(support, "request_headers", lambda: dict(ADMIN))
    monkeypatch.setenv(DB_ENV, str(store))
    monkeypatch.setenv(USER_HEADER_ENV, "X-Forwarded-Email")
    monkeypatch.setenv(GROUPS_HEADER_ENV, "X-Forwarded-Groups")
    monkeypatch.setenv(ACCESS_FILE_ENV, str(access_file))
    monkeypatch.setenv(PROXIES_ENV, "127.0.0.2")
    config.set_option("server.address", "0.0.0.0")
    yield peer
    config.set_option("server.address", None)


def test_the_app_ignores_admin_headers_from_another_peer(app_env: FakePeer) -> None:
    app_env.address = "127.0.0.3"
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception
    assert [t.value for t in at.title] == ["No access"]
    assert not at.dataframe


def test_the_app_honours_the_headers_from_the_named_proxy(app_env: FakePeer) -> None:
    app_env.address = "127.0.0.2"
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page("views/tenants.py")
    at.run()
    assert set(at.dataframe[0].value["tenant"]) == set(OWNED)


def test_the_app_itself_refuses_trusted_headers_on_an_open_address_without_a_proxy(
    app_env: FakePeer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`streamlit run` with the environment alone, on every address: every page is the error, no data."""
    monkeypatch.delenv(PROXIES_ENV)
    config.set_option("server.address", None)
    app_env.address = "127.0.0.2"
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception
    assert len(at.error) == 1 and "listening on every address" in at.error[0].value
    assert not at.dataframe
