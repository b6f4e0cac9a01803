"""HTTP basic auth of the exporter: bcrypt hashes (exporter-toolkit's format), checked in constant time.

Users map to bcrypt hashes (``$2a$``, ``$2b$``, ``$2y$``), as in exporter-toolkit's ``basic_auth_users``
and ``htpasswd -B`` files. Legacy ``--basic-auth-file`` lines with an unsalted SHA-256 hex digest are
still read (``legacy_users`` counts them, so the CLI can warn loudly), compared with
``hmac.compare_digest``. An unknown user is checked against a fixed dummy hash, so the answer takes as
long as for a known one. bcrypt runs one check at a time (it is meant to be slow), and results are cached
per (user, hash, password) digest, so a scraper that authenticates every 15 s costs one bcrypt check.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import threading
from collections.abc import Mapping
from pathlib import Path

import bcrypt

from gpulens.core.config import read_user_file
from gpulens.core.errors import UserError

BCRYPT_HASH = re.compile(r"^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$")
SHA256_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
_DUMMY_HASH = b"$2b$10$aLBfJ7PVmz2KlyHR92LPP.qC5gwZFcpdts.M0OTvtxhyi/haB1UCG"
"""bcrypt (cost 10) of a password no scraper uses: an unknown user costs as much as a known one."""
CACHE_SIZE = 100

MIGRATE_HINT = (
    "replace each digest with a bcrypt hash ('htpasswd -nBC 10 USER' prints 'USER:$2y$...') or move to "
    "--web.config.file with basic_auth_users (docs/real-nodes.md)"
)


def is_bcrypt_hash(value: str) -> bool:
    """True for a well-formed bcrypt hash (``$2a$``/``$2b$``/``$2y$``, cost, 53 characters of salt+hash)."""
    return BCRYPT_HASH.match(value) is not None and 4 <= int(value[4:6]) <= 31


class BasicAuthUsers:
    """The users allowed to scrape, and the one check of an ``Authorization`` header."""

    def __init__(self, users: Mapping[str, str]) -> None:
        """``users``: name -> bcrypt hash, or a legacy SHA-256 hex digest of the password."""
        for name, stored in users.items():
            if not is_bcrypt_hash(stored) and SHA256_HEX.match(stored) is None:
                raise UserError(f"basic auth user {name!r}: not a bcrypt hash ($2y$/$2b$/$2a$)")
        self._users = {name: stored for name, stored in users.items()}
        self._bcrypt_lock = threading.Lock()
        self._cache: dict[bytes, bool] = {}
        self._cache_lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        return sorted(self._users)

    @property
    def legacy_users(self) -> list[str]:
        """Users whose password is stored as an unsalted SHA-256 digest (to migrate)."""
        return sorted(name for name, stored in self._users.items() if not is_bcrypt_hash(stored))

    def check(self, header: str | None) -> bool:
        """True when ``header`` is ``Basic <base64 user:password>`` (scheme in any case) of a known user."""
        credentials = parse_basic_header(header)
        if credentials is None:
            return False
        user, password = credentials
        stored = self._users.get(user)
        known = stored is not None
        if stored is None or is_bcrypt_hash(stored):
            return self._check_bcrypt(user, stored or _DUMMY_HASH.decode(), password) and known
        digest = hashlib.sha256(password.encode("utf-8")).hexdigest()
        return hmac.compare_digest(digest, stored.lower())

    def _check_bcrypt(self, user: str, stored: str, password: str) -> bool:
        key = hashlib.sha256(b"\x00".join((user.encode(), stored.encode(), password.encode()))).digest()
        with self._cache_lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        with self._bcrypt_lock:
            try:
                ok = bcrypt.checkpw(password.encode("utf-8"), stored.encode("ascii"))
            except ValueError:
                ok = False
        with self._cache_lock:
            if len(self._cache) >= CACHE_SIZE:
                for old in list(self._cache)[: CACHE_SIZE // 10]:  # drop the oldest tenth
                    del self._cache[old]
            self._cache[key] = ok
        return ok


def parse_basic_header(header: str | None) -> tuple[str, str] | None:
    """(user, password) of ``Basic <base64>`` (the scheme name in any case), else None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic" or not token.strip():
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


def load_basic_auth_file(path: Path) -> BasicAuthUsers:
    """``--basic-auth-file``: ``user:<bcrypt hash>`` lines (htpasswd -B), or legacy ``user:<sha256 hex>``."""
    text = read_user_file(path, "basic-auth file ")
    users: dict[str, str] = {}
    expected = "expected 'user:<bcrypt hash>' (htpasswd -nBC 10 USER)"
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, stored = line.partition(":")
        stored = stored.strip()
        if not sep or not user or not (is_bcrypt_hash(stored) or SHA256_HEX.match(stored)):
            raise UserError(f"--basic-auth-file {path}:{number}: {expected}")
        users[user] = stored
    if not users:
        raise UserError(f"--basic-auth-file {path}: no users ({expected})")
    return BasicAuthUsers(users)
