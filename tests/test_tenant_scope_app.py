"""The Streamlit app behind an authenticating proxy: each caller sees only its tenants; no header, no data.

The request's headers come from the proxy; under AppTest (which has no HTTP request) a fake header
source stands in at our boundary, ``support.request_headers``. The real header path (Streamlit's
``st.context.headers`` behind a real proxy) is covered by tests/test_tenant_scope_browser.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboards.streamlit import support
from dashboards.streamlit.access import (
    ACCESS_FILE_ENV,
    GROUPS_HEADER_ENV,
    USER_HEADER_ENV,
    AccessFile,
    decide,
    load_access_file,
    trusted_headers_from,
)
from dashboards.streamlit.launch import DB_ENV, PAGES, streamlit_command
from gpulens.core.errors import UserError
from tests.support.cli import assert_one_line_error, gpulens
from tests.support.report_store import EVIL_TENANT, build_store
from tests.support.streamlit_app import fresh_caches  # noqa: F401 (an autouse fixture)
from tests.support.tenant_names import OWNED, leaks

APP = Path(__file__).resolve().parents[1] / "dashboards" / "streamlit" / "app.py"
GROUP_OF = {"vision": "team-vision", "nlp": "team-nlp", EVIL_TENANT: "team-evil"}
ACCESS_YAML = """\
admin_groups: [platform]
groups:
  team-vision: [vision]
  team-nlp: [nlp]
  team-evil: ['<script>alert(1)</script>"''']
"""


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("store") / "gpulens.duckdb")


@pytest.fixture
def access_file(tmp_path: Path) -> Path:
    path = tmp_path / "access.yaml"
    path.write_text(ACCESS_YAML, encoding="utf-8")
    return path


class FakeProxyHeaders:
    """Fake of the proxy's request headers (our boundary): what oauth2-proxy would set for a caller."""

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}

    def __call__(self) -> dict[str, str]:
        return dict(self.headers)


@pytest.fixture
def proxy(store: Path, access_file: Path, monkeypatch: pytest.MonkeyPatch, on_loopback: None) -> FakeProxyHeaders:
    fake = FakeProxyHeaders()
    monkeypatch.setattr(support, "request_headers", fake)
    monkeypatch.setenv(DB_ENV, str(store))
    monkeypatch.setenv(USER_HEADER_ENV, "X-Forwarded-Email")
    monkeypatch.setenv(GROUPS_HEADER_ENV, "X-Forwarded-Groups")
    monkeypatch.setenv(ACCESS_FILE_ENV, str(access_file))
    return fake


def _shown(at: AppTest) -> str:
    """Everything the run put on the page: element protos, and every dataframe's cells as CSV."""
    parts = []
    for node in at._tree:
        proto = getattr(node, "proto", None)
        if proto is not None:
            parts.append(str(proto))
        value = getattr(node, "value", None)
        if hasattr(value, "to_csv"):
            parts.append(value.to_csv())
    return "\n".join(parts)


def _visit_every_page(at: AppTest) -> str:
    shown = []
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    for path, _title, _icon in PAGES:
        at.switch_page(path)
        at.run()
        assert not at.exception, (path, [e.value for e in at.exception])
        shown.append(_shown(at))
    return "\n".join(shown)


@pytest.mark.parametrize("tenant", list(OWNED))
def test_every_page_shows_a_team_its_tenant_and_no_other(proxy: FakeProxyHeaders, tenant: str) -> None:
    proxy.headers = {"X-Forwarded-Email": "someone@example.com", "X-Forwarded-Groups": f"staff,{GROUP_OF[tenant]}"}
    shown = _visit_every_page(AppTest.from_file(str(APP), default_timeout=60))
    assert leaks(shown, tenant) == []
    assert "No access" not in shown


def test_the_tenants_page_of_a_team_lists_only_its_tenant(proxy: FakeProxyHeaders) -> None:
    proxy.headers = {"X-Forwarded-Email": "a@example.com", "X-Forwarded-Groups": "team-nlp"}
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page("views/tenants.py")
    at.run()
    assert list(at.dataframe[0].value["tenant"]) == ["nlp"]
    assert "Showing tenant: nlp" in [t.value for t in at.sidebar.text]


def test_the_platform_group_sees_every_tenant(proxy: FakeProxyHeaders) -> None:
    proxy.headers = {"x-forwarded-email": "ops@example.com", "x-forwarded-groups": "platform"}  # any case
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page("views/tenants.py")
    at.run()
    assert set(at.dataframe[0].value["tenant"]) == set(OWNED)


def test_one_callers_cached_results_never_reach_another_scope(proxy: FakeProxyHeaders) -> None:
    for tenant in ("vision", "nlp"):  # caches are not cleared between the two callers
        proxy.headers = {"X-Forwarded-Email": f"{tenant}@example.com", "X-Forwarded-Groups": GROUP_OF[tenant]}
        at = AppTest.from_file(str(APP), default_timeout=60)
        at.run()
        at.switch_page("views/tenants.py")
        at.run()
        assert list(at.dataframe[0].value["tenant"]) == [tenant]


@pytest.mark.parametrize("headers", [
    {},
    {"X-Forwarded-Groups": "platform"},  # groups without a user: not from the proxy
    {"X-Forwarded-Email": "", "X-Forwarded-Groups": "platform"},
    {"X-Forwarded-Email": "stranger@example.com", "X-Forwarded-Groups": "staff,contractors"},
    {"X-Forwarded-Email": "stranger@example.com"},
])
def test_a_caller_without_access_gets_the_no_access_page_and_no_data(
    proxy: FakeProxyHeaders, headers: dict[str, str]
) -> None:
    proxy.headers = headers
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception
    assert [t.value for t in at.title] == ["No access"]
    assert not at.dataframe and not at.metric and not at.get("vega_lite_chart")
    shown = _shown(at)
    assert leaks(shown, "") == []  # names no tenant at all
    for path, _title, _icon in PAGES:  # no page of the app is even registered for this caller
        with pytest.raises(ValueError, match=r"Known pages: \['No access'\]"):
            at.switch_page(path)


def test_without_access_options_the_app_shows_every_tenant_as_before(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for env in (USER_HEADER_ENV, GROUPS_HEADER_ENV, ACCESS_FILE_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv(DB_ENV, str(store))
    monkeypatch.setattr(support, "request_headers", FakeProxyHeaders())  # no header at all
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    at.switch_page("views/tenants.py")
    at.run()
    assert set(at.dataframe[0].value["tenant"]) == set(OWNED)


def test_a_bad_access_file_is_one_error_on_the_page(proxy: FakeProxyHeaders, access_file: Path) -> None:
    access_file.write_text("groups:\n  team-nlp: nlp\n", encoding="utf-8")
    proxy.headers = {"X-Forwarded-Email": "a@example.com", "X-Forwarded-Groups": "team-nlp"}
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception
    assert [e.value for e in at.error] == [f"--access-file {access_file}: groups.team-nlp: Input should be a valid list"]
    assert not at.dataframe


# -- the access file and the header decision ----------------------------------------------------------------


@pytest.mark.parametrize(("text", "message"), [
    ("groups:\n  team-nlp: nlp\n", "groups.team-nlp: Input should be a valid list"),
    ("groups:\n  team-nlp: []\n", "groups.team-nlp: List should have at least 1 item"),
    ("admins: [ops]\n", "admins: Extra inputs are not permitted"),
    ("{}\n", "grants nothing"),
    ("admin_groups: ['']\n", "admin_groups.0: String should have at least 1 character"),
    ("groups: [a\n", "is not valid YAML"),
])
def test_a_bad_access_file_is_a_one_line_error_naming_the_flag_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "access.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError) as err:
        load_access_file(path)
    assert str(err.value).startswith(f"--access-file {path}")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_dashboard_command_rejects_a_bad_access_file_in_one_line(store: Path, tmp_path: Path) -> None:
    bad = tmp_path / "access.yaml"
    bad.write_text("groups:\n  team-nlp: nlp\n", encoding="utf-8")
    proc = gpulens("dashboard", "--db", str(store), "--trusted-user-header", "X-Forwarded-Email",
                   "--trusted-groups-header", "X-Forwarded-Groups", "--access-file", str(bad))
    assert_one_line_error(proc, "--access-file", "groups.team-nlp: Input should be a valid list")


def test_the_dashboard_command_refuses_half_of_the_access_options(store: Path) -> None:
    proc = gpulens("dashboard", "--db", str(store), "--trusted-user-header", "X-Forwarded-Email")
    assert_one_line_error(proc, "--trusted-user-header also needs --trusted-groups-header and --access-file")


def test_the_launch_command_hands_the_access_options_to_the_app(access_file: Path, store: Path) -> None:
    trusted = trusted_headers_from(["--trusted-user-header", "X-Forwarded-Email", "--trusted-groups-header",
                                    "X-Forwarded-Groups", "--access-file", str(access_file)], {})
    argv = streamlit_command(store, port=8501, host="127.0.0.1", trusted=trusted)
    assert trusted_headers_from(argv[argv.index("--") + 1:], {}) == trusted


def test_groups_of_several_teams_see_the_union_and_an_admin_group_sees_all(access_file: Path) -> None:
    access = load_access_file(access_file)
    trusted = trusted_headers_from([], {USER_HEADER_ENV: "X-User", GROUPS_HEADER_ENV: "X-Groups",
                                        ACCESS_FILE_ENV: str(access_file)})
    assert trusted is not None
    both = decide({"X-User": "a", "X-Groups": "team-nlp, team-vision"}, trusted, access)
    assert both.scope is not None and both.scope.tenants == {"nlp", "vision"}
    admin = decide({"X-User": "a", "X-Groups": "team-nlp,platform"}, trusted, access)
    assert admin.scope is not None and admin.scope.sees_all
    assert isinstance(access, AccessFile)
