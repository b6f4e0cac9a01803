"""Who may see which tenants in the app: trusted proxy headers and an access file mapping groups to tenants.

The app trusts the user and groups headers only from the authenticating proxy that sets them
(oauth2-proxy in deploy/overlays/oauth2-proxy): on a loopback address next to it, or, on any other
address, only from the peers named with ``--trusted-proxy`` (an address or CIDR, repeatable); headers
from any other peer are ignored. Trusted headers on a non-loopback address without a named proxy are
refused: any client that reaches the app could send its own groups. A request without the user
header, or whose groups map to no tenant, is denied: no data at all.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from dashboards.report.scope import TenantScope
from gpulens.core.config import load_yaml_model
from gpulens.core.errors import UserError

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]

USER_HEADER_ENV = "GPULENS_TRUSTED_USER_HEADER"
GROUPS_HEADER_ENV = "GPULENS_TRUSTED_GROUPS_HEADER"
ACCESS_FILE_ENV = "GPULENS_ACCESS_FILE"
PROXIES_ENV = "GPULENS_TRUSTED_PROXIES"
"""Comma-separated addresses or CIDRs of the proxy, as ``--trusted-proxy`` (repeatable) gives them."""
PROXY_FLAG = "--trusted-proxy"
FLAGS = {"--trusted-user-header": USER_HEADER_ENV, "--trusted-groups-header": GROUPS_HEADER_ENV,
         "--access-file": ACCESS_FILE_ENV}
"""The app's access options: flag after ``--`` (as `gpulens dashboard` passes them) or environment variable."""


class AccessFile(BaseModel):
    """The access file: ``admin_groups`` see every tenant; ``groups`` maps a group to the tenants it sees."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    admin_groups: list[Name] = Field(default_factory=list)
    groups: dict[Name, Annotated[list[Name], Field(min_length=1)]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _grants_something(self) -> AccessFile:
        if not self.admin_groups and not self.groups:
            raise ValueError("grants nothing: give admin_groups or groups (group: [tenant, ...])")
        return self


def load_access_file(path: Path) -> AccessFile:
    """Read and validate the access file; any problem is a one-line ``UserError`` naming the flag and file."""
    try:
        return load_yaml_model(path, AccessFile)
    except UserError as exc:
        raise UserError(f"--access-file {exc}") from exc


Network = ipaddress.IPv4Network | ipaddress.IPv6Network
LOOPBACK_PEERS = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))
"""The peers Streamlit reports as no address at all (``st.context.ip_address`` is None for them)."""


@dataclass(frozen=True)
class TrustedHeaders:
    """The headers the proxy sets, the access file that turns groups into tenants, and the proxy's address."""

    user: str
    groups: str
    access_file: Path
    proxies: tuple[Network, ...] = field(default=())
    """Peers whose headers are honoured; empty: any peer (allowed on a loopback address only)."""

    def from_proxy(self, peer: str | None) -> bool:
        """Whether a request from ``peer`` (None: a loopback peer, as Streamlit reports it) may carry the headers."""
        if not self.proxies:
            return True
        try:
            address = ipaddress.ip_address(peer) if peer is not None else None
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # an IPv4 peer of a dual-stack listener
        addresses = LOOPBACK_PEERS if address is None else (address,)
        return any(a in net for a in addresses for net in self.proxies if a.version == net.version)


def parse_proxies(values: Sequence[str]) -> tuple[Network, ...]:
    """``--trusted-proxy`` values (addresses or CIDRs); a bad one is a ``UserError`` naming the flag."""
    out = []
    for value in values:
        try:
            out.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise UserError(f"invalid {PROXY_FLAG} {value!r}: give the proxy's IP address or a CIDR "
                            "(e.g. 10.0.0.5 or 10.0.0.0/24)") from None
    return tuple(out)


def is_loopback(host: str) -> bool:
    """Whether listening on ``host`` keeps the app reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_safe_listen(host: str | None, trusted: TrustedHeaders | None) -> None:
    """Refuse trusted headers on a non-loopback address unless the proxy's address is named."""
    if trusted is None or trusted.proxies or (host is not None and is_loopback(host)):
        return
    where = f"--host {host}" if host else "listening on every address"
    raise UserError(f"{where} with --trusted-user-header: any client that reaches the app could send its own "
                    f"{trusted.groups} header; name the authenticating proxy with {PROXY_FLAG} ADDRESS "
                    f"(or CIDR; {PROXIES_ENV} in the environment), or listen on 127.0.0.1 behind it")


def trusted_headers_from(argv: Sequence[str], environ: Mapping[str, str]) -> TrustedHeaders | None:
    """The access options given as flags in ``argv`` or in the environment; None when none is given.

    Some but not all of them is a ``UserError``: a half-configured gate must not open to everyone.
    """
    values: dict[str, str | None] = {}
    for flag, env in FLAGS.items():
        values[flag] = _flag(argv, flag) or environ.get(env) or None
    given = [f for f, v in values.items() if v]
    proxy_values = _flags(argv, PROXY_FLAG) or [v for v in environ.get(PROXIES_ENV, "").split(",") if v.strip()]
    proxies = parse_proxies(proxy_values)
    if not given:
        if proxies:
            raise UserError(f"{PROXY_FLAG} goes with {', '.join(FLAGS)}: it says whose headers to trust")
        return None
    missing = [f for f, v in values.items() if not v]
    if missing:
        raise UserError(f"{', '.join(given)} also need{'s' if len(given) == 1 else ''} {' and '.join(missing)}")
    return TrustedHeaders(str(values["--trusted-user-header"]), str(values["--trusted-groups-header"]),
                          Path(str(values["--access-file"])), proxies)


def _flags(argv: Sequence[str], flag: str) -> list[str]:
    """Every value of ``flag`` in ``argv`` (``--flag V`` or ``--flag=V``), in order."""
    out = []
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            out.append(argv[i + 1])
        elif arg.startswith(f"{flag}="):
            out.append(arg.removeprefix(f"{flag}="))
    return out


def _flag(argv: Sequence[str], flag: str) -> str | None:
    found = _flags(argv, flag)
    return found[0] if found else None


@dataclass(frozen=True)
class Decision:
    """What one request may see: a scope, or no access with the reason shown to the caller."""

    scope: TenantScope | None
    user: str | None
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.scope is not None


def decide(headers: Mapping[str, str], trusted: TrustedHeaders, access: AccessFile, peer: str | None = None) -> Decision:
    """The scope of a request from its (proxy-set) headers: admin groups see all, others their groups' tenants.

    ``peer`` is the request's address (None: a loopback peer); headers from a peer that is not a trusted
    proxy are ignored, so such a request has no access.
    """
    if not trusted.from_proxy(peer):
        return Decision(None, None, "the request did not come through the trusted proxy: sign in through it")
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    user = lowered.get(trusted.user.lower(), "").strip()
    if not user:
        return Decision(None, None, f"the request carries no {trusted.user} header: sign in through the proxy")
    groups = [g.strip() for g in lowered.get(trusted.groups.lower(), "").split(",") if g.strip()]
    if any(g in access.admin_groups for g in groups):
        return Decision(TenantScope.everything(), user)
    tenants = {t for g in groups for t in access.groups.get(g, ())}
    if not tenants:
        return Decision(None, user, f"none of your groups ({len(groups)}) is given any tenant in the access file: "
                                    "ask the platform team")
    return Decision(TenantScope.of(tenants), user)


def current_options() -> TrustedHeaders | None:
    """The access options of this app process (flags after ``--`` or environment)."""
    import sys

    return trusted_headers_from(sys.argv[1:], os.environ)
