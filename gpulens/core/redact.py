"""Credentials out of URLs before a URL is shown or stored: ``https://user:***@host/...``.

A URL may carry ``user:password@`` (or a token alone, ``token@``) in its authority. Every message
(errors, warnings, progress) and every stored column that names a target goes through
:func:`redact`: the password, or a lone user part (often a token), becomes ``***``; a user name
before ``:`` stays, so the message still says which account was used. Text that embeds URLs (an
HTTP library's exception message, a redirect's ``Location``) is redacted the same way, and so are the
records of a logger given to :func:`redact_logs_of` (httpx logs every request's full URL at INFO).
"""

from __future__ import annotations

import logging
import re

MASK = "***"

_AUTHORITY_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s]*)@")
"""A scheme, then the userinfo: everything up to the last ``@`` before the path, query, fragment or a space."""


def _mask(match: re.Match[str]) -> str:
    user, colon, _password = match["userinfo"].partition(":")
    return f"{match['scheme']}{user}:{MASK}@" if colon else f"{match['scheme']}{MASK}@"


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it replaced by ``***`` (a URL or a whole message)."""
    return _AUTHORITY_USERINFO.sub(_mask, text)


class RedactingFilter(logging.Filter):
    """Rewrites a log record whose message names a URL with credentials, before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


def redact_logs_of(logger_name: str) -> None:
    """Redact URL credentials in every record of the logger ``logger_name`` (once; idempotent)."""
    logger = logging.getLogger(logger_name)
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())
