"""``--web.config.file``: the exporter-toolkit YAML (TLS, client certificates, bcrypt users) on a real server."""

from __future__ import annotations

import hashlib
import ssl
from pathlib import Path

import bcrypt
import pytest

from exporter.auth import _DUMMY_HASH, BasicAuthUsers
from exporter.server import auth_warnings, web_config_of
from exporter.settings import ExporterSettings
from exporter.web_config import load_web_config
from gpulens.core.errors import UserError
from tests.support.cli import assert_one_line_error, gpulens
from tests.support.exporter import http_get, running_exporter_process
from tests.test_exporter_server import self_signed_cert
from tests.test_exporter_server_hostile import auth_header, start, web_config


def bcrypt_hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()


def test_tls_and_bcrypt_users_from_the_web_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = web_config(tmp_path, tls=True, password="s3cret")
    monkeypatch.chdir("/")  # cert_file and key_file are relative to the config file, not the working directory
    handle = start(ExporterSettings(listen="127.0.0.1:0", web_config_file=config))
    client = ssl.create_default_context(cafile=str(tmp_path / "tls.crt"))
    try:
        assert handle.url.startswith("https://")
        assert http_get(handle.url + "/metrics", context=client)[0] == 401
        assert http_get(handle.url + "/metrics", auth_header("prom", "wrong"), context=client)[0] == 401
        assert http_get(handle.url + "/metrics", auth_header("nobody", "s3cret"), context=client)[0] == 401
        for scheme in ("Basic", "basic", "BASIC"):  # the scheme name is case-insensitive (RFC 7617)
            status, _, body = http_get(handle.url + "/metrics", auth_header("prom", "s3cret", scheme), context=client)
            assert status == 200 and b"gpulens_gpu_info" in body
        assert http_get(handle.url + "/", context=client)[0] == 401  # everything but /healthz needs credentials
        assert http_get(handle.url + "/healthz", context=client)[0] == 200
    finally:
        handle.stop()


def test_client_certificates_are_required_and_verified(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    config = tmp_path / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                      f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {cert}\n"
                      "  min_version: TLS13\n")
    handle = start(ExporterSettings(listen="127.0.0.1:0", web_config_file=config))
    try:
        with_cert = ssl.create_default_context(cafile=str(cert))
        with_cert.load_cert_chain(str(cert), str(key))
        assert http_get(handle.url + "/metrics", context=with_cert)[0] == 200
        without_cert = ssl.create_default_context(cafile=str(cert))
        with pytest.raises(OSError):
            http_get(handle.url + "/metrics", context=without_cert, timeout=5)
        old_client = ssl.create_default_context(cafile=str(cert))
        old_client.load_cert_chain(str(cert), str(key))
        old_client.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(OSError):  # min_version TLS13
            http_get(handle.url + "/metrics", context=old_client, timeout=5)
    finally:
        handle.stop()


def test_headers_from_http_server_config_are_sent(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text("http_server_config:\n  headers:\n    X-Frame-Options: deny\n    X-Content-Type-Options: nosniff\n")
    handle = start(ExporterSettings(listen="127.0.0.1:0", web_config_file=config))
    try:
        _, headers, _ = http_get(handle.url + "/metrics")
        assert headers["X-Frame-Options"] == "deny" and headers["X-Content-Type-Options"] == "nosniff"
    finally:
        handle.stop()


def test_an_empty_users_map_means_no_auth_as_in_exporter_toolkit(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text("basic_auth_users: {}\n")
    web = load_web_config(config)
    assert web.users is None and web.ssl_context is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("tls_server_config: [\n", "not valid YAML line"),
        ("basic_auth_user:\n  prom: x\n", "unknown field basic_auth_user"),
        ("basic_auth_users:\n  prom: " + hashlib.sha256(b"pw").hexdigest() + "\n", "prom: not a bcrypt hash"),
        ("rate_limit:\n  interval: 1s\n", "does not support rate_limit"),
        ("tls_server_config:\n  cert_file: missing.crt\n", "needs both cert_file and key_file"),
        ("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
         "does not support cipher_suites"),
        ("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  client_auth_type: RequireAnyClientCert\n",
         "unverified client certificates"),
        ("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  client_ca_file: ca.crt\n",
         "client_auth_type is NoClientCert"),
        ("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  min_version: TLS9\n", "min_version: unknown"),
        ("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n", "cannot load TLS certificate"),
        ("http_server_config:\n  headers:\n    Server: Apache\n", "Server is not allowed"),
    ],
)
def test_a_bad_web_config_is_one_clear_error_naming_the_flag(tmp_path: Path, text: str, fragment: str) -> None:
    config = tmp_path / "web.yml"
    config.write_text(text)
    with pytest.raises(UserError, match="--web.config.file") as caught:
        load_web_config(config)
    assert fragment in str(caught.value) and "\n" not in str(caught.value)


def test_the_cli_refuses_a_bad_web_config_before_serving(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text("basic_auth_users:\n  prom: plaintext\n")
    assert_one_line_error(gpulens("exporter", "--listen", "127.0.0.1:0", "--web-config-file", str(config)),
                          "--web.config.file", "not a bcrypt hash")
    assert_one_line_error(gpulens("exporter", "--listen", "127.0.0.1:0", "--web.config.file",
                                  str(tmp_path / "missing.yml")), "missing.yml")
    users = tmp_path / "users"
    users.write_text("prom:" + bcrypt_hash("pw") + "\n")
    assert_one_line_error(gpulens("exporter", "--web.config.file", str(config), "--basic-auth-file", str(users)),
                          "--web.config.file replaces --basic-auth-file")


def test_the_cli_serves_with_the_dcgm_exporter_spelling(tmp_path: Path) -> None:
    config = tmp_path / "web.yml"
    config.write_text(f"basic_auth_users:\n  prom: '{bcrypt_hash('pw')}'\n")
    with running_exporter_process("--web-config-file", str(config)) as (_, url):
        assert http_get(url + "/metrics")[0] == 401
        assert http_get(url + "/metrics", auth_header("prom", "pw"))[0] == 200


def test_a_legacy_sha256_password_file_still_works_but_warns_loudly_how_to_migrate(tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text("prom:" + hashlib.sha256(b"pw").hexdigest() + "\nbot:" + bcrypt_hash("pw2") + "\n")
    settings = ExporterSettings(listen="127.0.0.1:0", basic_auth_file=users)
    (warning,) = auth_warnings(settings, web_config_of(settings))
    assert "1 user(s) (prom)" in warning and "unsalted SHA-256" in warning and "htpasswd -nBC 10" in warning
    with running_exporter_process("--basic-auth-file", str(users)) as (proc, url):
        assert http_get(url + "/metrics", auth_header("prom", "pw"))[0] == 200
        assert http_get(url + "/metrics", auth_header("bot", "pw2"))[0] == 200
        assert http_get(url + "/metrics", auth_header("bot", "pw"))[0] == 401
    assert "gpulens: warning: --basic-auth-file" in proc.stderr.read()  # type: ignore[union-attr]


def test_an_unknown_user_is_checked_against_a_real_bcrypt_hash() -> None:
    """Unknown users cost one bcrypt check like known ones (no timing oracle), and never pass."""
    assert bcrypt.checkpw(b"anything", _DUMMY_HASH) is False
    users = BasicAuthUsers({"prom": bcrypt_hash("pw")})
    assert not users.check(auth_header("ghost", "pw")["Authorization"])
    assert not users.check("Bearer abc") and not users.check("Basic !!!") and not users.check(None)
