"""Who may see which tenants in the app: trusted proxy headers and an access file mapping groups to tenants.

The app trusts the user and groups headers only because it listens on localhost behind an
authenticating proxy (oauth2-proxy in deploy/overlays/oauth2-proxy) that sets them. A request without
the user header, or whose groups map to no tenant, is denied: no data at all.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from gpulens.analytics.report.scope import TenantScope
from gpulens.core.config import load_yaml_model
from gpulens.core.errors import UserError

Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]

USER_HEADER_ENV = "GPULENS_TRUSTED_USER_HEADER"
GROUPS_HEADER_ENV = "GPULENS_TRUSTED_GROUPS_HEADER"
ACCESS_FILE_ENV = "GPULENS_ACCESS_FILE"
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


@dataclass(frozen=True)
class TrustedHeaders:
    """The headers the proxy sets and the access file that turns groups into tenants."""

    user: str
    groups: str
    access_file: Path


def trusted_headers_from(argv: Sequence[str], environ: Mapping[str, str]) -> TrustedHeaders | None:
    """The access options given as flags in ``argv`` or in the environment; None when none is given.

    Some but not all of them is a ``UserError``: a half-configured gate must not open to everyone.
    """
    values: dict[str, str | None] = {}
    for flag, env in FLAGS.items():
        values[flag] = _flag(argv, flag) or environ.get(env) or None
    given = [f for f, v in values.items() if v]
    if not given:
        return None
    missing = [f for f, v in values.items() if not v]
    if missing:
        raise UserError(f"{', '.join(given)} also need{'s' if len(given) == 1 else ''} {' and '.join(missing)}")
    return TrustedHeaders(str(values["--trusted-user-header"]), str(values["--trusted-groups-header"]),
                          Path(str(values["--access-file"])))


def _flag(argv: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(f"{flag}="):
            return arg.removeprefix(f"{flag}=")
    return None


@dataclass(frozen=True)
class Decision:
    """What one request may see: a scope, or no access with the reason shown to the caller."""

    scope: TenantScope | None
    user: str | None
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.scope is not None


def decide(headers: Mapping[str, str], trusted: TrustedHeaders, access: AccessFile) -> Decision:
    """The scope of a request from its (proxy-set) headers: admin groups see all, others their groups' tenants."""
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
