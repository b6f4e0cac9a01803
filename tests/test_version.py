"""`gpulens --version` says the package version and the commit it was built from, or that the commit is unknown."""

from __future__ import annotations

import subprocess
import tomllib
from importlib import metadata
from pathlib import Path

from gpulens.core import __version__
from gpulens.core.version import _checkout_commit, build_commit, package_version
from tests.support.cli import gpulens

ROOT = Path(__file__).resolve().parents[1]


def test_the_version_is_the_one_pyproject_toml_declares() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert package_version() == metadata.version("gpulens") == __version__ == declared


def test_version_prints_the_version_and_the_commit_of_the_checkout() -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    proc = gpulens("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"gpulens {package_version()} (commit {head})"
    assert build_commit() == head


def git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_only_the_top_of_a_git_checkout_with_a_pyproject_has_a_commit(tmp_path: Path) -> None:
    assert _checkout_commit(tmp_path) is None  # neither pyproject.toml nor git
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert _checkout_commit(tmp_path) is None  # not in git
    git(tmp_path, "init", "-q")
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "pyproject.toml").write_text("[project]\nname = 'y'\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "x")
    assert _checkout_commit(tmp_path) == git(tmp_path, "rev-parse", "--short=12", "HEAD")
    assert _checkout_commit(tmp_path / "inner") is None  # inside someone else's repository: not our commit
