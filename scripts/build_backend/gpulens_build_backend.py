"""The build backend: setuptools', plus the source commit baked into built packages.

``pyproject.toml`` names this module (``backend-path``). A wheel or sdist carries
``gpulens/core/build_commit.txt`` (read by ``gpulens --version``): ``$GPULENS_COMMIT`` where the source
has no git metadata (an image build), else the commit git names for this checkout, else what an sdist
being built again already carries, else nothing ("commit unknown"). Editable installs carry none: they
ask git when they run.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import (  # noqa: F401  (the hooks this backend does not change)
    build_editable,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
    prepare_metadata_for_build_editable,
    prepare_metadata_for_build_wheel,
)

COMMIT_FILE = Path("gpulens", "core", "build_commit.txt")
COMMIT = re.compile(r"[0-9a-f]{7,40}(-dirty)?")


def source_commit(here: Path) -> str | None:
    """The commit of the source in ``here``: ``$GPULENS_COMMIT``, else asked of git, else None."""
    given = os.environ.get("GPULENS_COMMIT", "").strip()
    if given:
        if not COMMIT.fullmatch(given):
            raise SystemExit(f"GPULENS_COMMIT={given!r} is not a git commit (7-40 hex digits, optionally -dirty)")
        return given
    try:
        top, commit = subprocess.run(["git", "-C", str(here), "rev-parse", "--show-toplevel", "--short=12", "HEAD"],
                                     capture_output=True, text=True, check=True, timeout=10).stdout.split()
        dirty = subprocess.run(["git", "-C", str(here), "diff", "--quiet", "HEAD", "--"],
                               capture_output=True, check=False, timeout=30).returncode != 0
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if Path(top).resolve() != here.resolve():  # a copy of the source inside some other repository
        return None
    return f"{commit}-dirty" if dirty else commit


@contextmanager
def commit_baked_in() -> Iterator[None]:
    """The commit file in the source tree while a package is built; the tree as it was afterwards."""
    target = Path.cwd() / COMMIT_FILE
    # setuptools keeps build/lib between builds: a commit baked in by an earlier build must not ride along.
    (Path.cwd() / "build" / "lib" / COMMIT_FILE).unlink(missing_ok=True)
    before = target.read_text(encoding="utf-8") if target.is_file() else None
    commit = source_commit(Path.cwd())
    if commit:
        target.write_text(commit + "\n", encoding="utf-8")
    try:
        yield
    finally:
        if before is None:
            target.unlink(missing_ok=True)
        else:
            target.write_text(before, encoding="utf-8")


def _with_commit(hook: Callable[..., str]) -> Callable[..., str]:
    def run(*args: Any, **kwargs: Any) -> str:
        with commit_baked_in():
            return hook(*args, **kwargs)

    run.__name__ = hook.__name__
    run.__doc__ = hook.__doc__
    return run


build_wheel = _with_commit(_setuptools.build_wheel)
build_sdist = _with_commit(_setuptools.build_sdist)
