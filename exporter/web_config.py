"""The exporter-toolkit web config (``--web.config.file``): TLS server settings and bcrypt basic-auth users.

The YAML is the one node_exporter, dcgm-exporter and every exporter built on Prometheus' exporter-toolkit
read: ``tls_server_config`` (``cert_file``, ``key_file``, ``client_auth_type``, ``client_ca_file``,
``min_version``, ``max_version``), ``http_server_config`` (``headers``) and ``basic_auth_users``
(user -> bcrypt hash). Parsing is strict like the toolkit's (unknown keys are errors); relative paths
resolve against the file's directory. Settings the toolkit has but gpulens cannot honour (inline
certificates, cipher and curve lists, ``client_allowed_sans``, ``rate_limit``, client-auth types that do
not verify the certificate) are refused with a clear message rather than silently ignored. The file is
read once at start: restart the exporter to rotate certificates or users.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.auth import BasicAuthUsers, is_bcrypt_hash
from gpulens.core.config import read_user_file
from gpulens.core.errors import UserError

FLAG = "--web.config.file"

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3,
}
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
ALLOWED_HEADERS = {"content-security-policy": "Content-Security-Policy", "x-frame-options": "X-Frame-Options",
                   "x-content-type-options": "X-Content-Type-Options", "x-xss-protection": "X-XSS-Protection",
                   "strict-transport-security": "Strict-Transport-Security"}

_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version",
             "prefer_server_cipher_suites"}
_TLS_UNSUPPORTED = {"cert": "inline certificates (use cert_file)", "key": "inline keys (use key_file)",
                    "client_ca": "an inline client CA (use client_ca_file)",
                    "cipher_suites": "cipher_suites (the defaults of Python's OpenSSL apply)",
                    "curve_preferences": "curve_preferences",
                    "client_allowed_sans": "client_allowed_sans"}
_TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users"}
_TOP_UNSUPPORTED = {"rate_limit": "rate_limit (use --max-concurrent-requests)"}


@dataclass(frozen=True)
class WebConfig:
    """What a web config file asks for: a TLS context (None = plain HTTP), users (None = no auth), headers."""

    ssl_context: ssl.SSLContext | None = None
    users: BasicAuthUsers | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _fail(path: Path, message: str) -> UserError:
    return UserError(f"{FLAG} {path}: {message}")


def _mapping(path: Path, value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(path, f"{where} must be a mapping")
    return value


def _check_keys(path: Path, data: dict[str, Any], known: set[str], unsupported: dict[str, str], where: str) -> None:
    for key in data:
        if key in unsupported:
            raise _fail(path, f"{where}{key}: gpulens does not support {unsupported[key]}")
        if key not in known:
            raise _fail(path, f"unknown field {where}{key} (known: {', '.join(sorted(known))})")


def load_web_config(path: Path) -> WebConfig:
    """Parse and check ``path``; every problem is a one-line ``UserError`` naming the flag and the file."""
    text = read_user_file(path, f"{FLAG} ")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise _fail(path, f"not valid YAML{where}") from None
    data = _mapping(path, data, "the file")
    _check_keys(path, data, _TOP_KEYS, _TOP_UNSUPPORTED, "")
    base = path.parent
    context = _tls(path, base, _mapping(path, data.get("tls_server_config"), "tls_server_config"))
    users = _users(path, _mapping(path, data.get("basic_auth_users"), "basic_auth_users"))
    headers = _headers(path, _mapping(path, data.get("http_server_config"), "http_server_config"))
    return WebConfig(ssl_context=context, users=users, headers=headers)


def _users(path: Path, raw: dict[str, Any]) -> BasicAuthUsers | None:
    users: dict[str, str] = {}
    for name, hashed in raw.items():
        if not isinstance(hashed, str) or not is_bcrypt_hash(hashed.strip()):
            raise _fail(path, f"basic_auth_users.{name}: not a bcrypt hash (make one with 'htpasswd -nBC 10 \"\"')")
        users[str(name)] = hashed.strip()
    return BasicAuthUsers(users) if users else None  # an empty map means no auth, as in exporter-toolkit


def _headers(path: Path, raw: dict[str, Any]) -> dict[str, str]:
    _check_keys(path, raw, {"headers", "http2"}, {}, "http_server_config.")
    headers: dict[str, str] = {}
    for name, value in _mapping(path, raw.get("headers"), "http_server_config.headers").items():
        canonical = ALLOWED_HEADERS.get(str(name).lower())
        if canonical is None:
            raise _fail(path, f"http_server_config.headers: {name} is not allowed "
                              f"(allowed: {', '.join(ALLOWED_HEADERS.values())})")
        text = str(value)
        if "\r" in text or "\n" in text:
            raise _fail(path, f"http_server_config.headers.{name}: a header value is one line")
        headers[canonical] = text
    return headers


def _file(path: Path, base: Path, raw: dict[str, Any], key: str) -> Path | None:
    value = raw.get(key)
    if value in (None, ""):
        return None
    found = Path(str(value))
    return found if found.is_absolute() else base / found


def _tls(path: Path, base: Path, raw: dict[str, Any]) -> ssl.SSLContext | None:
    _check_keys(path, raw, _TLS_KEYS, _TLS_UNSUPPORTED, "tls_server_config.")
    cert, key = _file(path, base, raw, "cert_file"), _file(path, base, raw, "key_file")
    ca = _file(path, base, raw, "client_ca_file")
    auth_type = str(raw.get("client_auth_type") or "NoClientCert")
    if not raw or not any((cert, key, ca, raw.get("client_auth_type"))):
        return None  # TLS is on when any certificate, key, CA or client-auth field is set
    if cert is None or key is None:
        raise _fail(path, "tls_server_config needs both cert_file and key_file")
    if auth_type in UNVERIFIED_CLIENT_AUTH:
        raise _fail(path, f"tls_server_config.client_auth_type {auth_type} accepts unverified client "
                          "certificates; use RequireAndVerifyClientCert (or VerifyClientCertIfGiven)")
    if auth_type not in CLIENT_AUTH:
        raise _fail(path, f"tls_server_config.client_auth_type: unknown {auth_type!r} "
                          f"(use one of {', '.join(CLIENT_AUTH)})")
    if ca is not None and auth_type == "NoClientCert":
        raise _fail(path, "tls_server_config.client_ca_file is set but client_auth_type is NoClientCert")
    if ca is None and auth_type != "NoClientCert":
        raise _fail(path, f"tls_server_config.client_auth_type {auth_type} needs client_ca_file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _version(path, raw, "min_version", "TLS12")
    context.maximum_version = _version(path, raw, "max_version", "TLS13")
    if context.minimum_version > context.maximum_version:
        raise _fail(path, "tls_server_config.min_version is above max_version")
    try:
        context.load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as exc:
        raise _fail(path, f"cannot load TLS certificate {cert} / key {key}: {exc}") from None
    context.verify_mode = CLIENT_AUTH[auth_type]
    if ca is not None:
        try:
            context.load_verify_locations(cafile=str(ca))
        except (OSError, ssl.SSLError) as exc:
            raise _fail(path, f"cannot load client CA {ca}: {exc}") from None
    return context


def _version(path: Path, raw: dict[str, Any], key: str, default: str) -> ssl.TLSVersion:
    name = str(raw.get(key) or default)
    if name not in TLS_VERSIONS:
        raise _fail(path, f"tls_server_config.{key}: unknown {name!r} (use one of {', '.join(TLS_VERSIONS)})")
    return TLS_VERSIONS[name]
