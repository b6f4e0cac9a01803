"""The version and the commit of this gpulens, as ``gpulens --version`` prints them.

The version is the package's (``pyproject.toml``, the one place it is written). The commit is baked
into a built package by the build backend (``scripts/build_backend/gpulens_build_backend.py``); an editable install run from its git checkout asks git instead.
"""

from __future__ import annotations

import subprocess
from importlib import metadata, resources
from pathlib import Path

COMMIT_FILE = "build_commit.txt"
UNKNOWN = "unknown"


def package_version() -> str:
    """The installed distribution's version; ``0+unknown`` when gpulens runs from a tree never installed."""
    try:
        return metadata.version("gpulens")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def build_commit() -> str:
    """The commit this gpulens was built from, ``unknown`` when neither the package nor git says."""
    baked = resources.files("gpulens.core").joinpath(COMMIT_FILE)
    if baked.is_file():
        return baked.read_text(encoding="utf-8").strip() or UNKNOWN
    return _checkout_commit(Path(__file__).resolve().parents[2]) or UNKNOWN


def _checkout_commit(root: Path) -> str | None:
    """HEAD of ``root`` when it is the top of a git checkout (an editable install), else None; changes not marked."""
    if not (root / "pyproject.toml").is_file():
        return None
    try:
        top, commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--show-toplevel", "--short=12", "HEAD"],
            capture_output=True, text=True, check=True, timeout=10,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return commit if Path(top).resolve() == root else None


def describe() -> str:
    """``gpulens <version> (commit <commit>)``."""
    return f"gpulens {package_version()} (commit {build_commit()})"
