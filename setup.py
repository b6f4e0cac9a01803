"""Packages: the top-level folders install as one namespace, ``gpulens.*``.

``exporter/``, ``collector/``, ``analytics/`` and ``dashboards/`` stay at the top of the repository and
are mapped to ``gpulens.exporter`` and so on, so a wheel's only top-level package is ``gpulens``. The
symbolic links ``gpulens/<folder> -> ../<folder>`` let tools that walk directories (import-linter, mypy)
see the same layout from the repository root; the packages themselves come from the mapping below.

A built package also carries the commit it was built from (``gpulens --version``): ``$GPULENS_COMMIT``
where the source has no git metadata (an image build), else ``git``, else none ("commit unknown").
"""

import os
import re
import subprocess
from pathlib import Path

from setuptools import find_namespace_packages, find_packages, setup
from setuptools.command.build_py import build_py

FOLDERS = ("exporter", "collector", "analytics", "dashboards")
COMMIT_FILE = Path("gpulens", "core", "build_commit.txt")  # read by gpulens/core/version.py
COMMIT = re.compile(r"[0-9a-f]{7,40}(-dirty)?")


def source_commit() -> str | None:
    """The commit of the source being built: ``$GPULENS_COMMIT``, else asked of git, else None."""
    given = os.environ.get("GPULENS_COMMIT", "").strip()
    if given:
        if not COMMIT.fullmatch(given):
            raise SystemExit(f"GPULENS_COMMIT={given!r} is not a git commit (7-40 hex digits, optionally -dirty)")
        return given
    here = Path(__file__).resolve().parent
    try:
        top, commit = subprocess.run(["git", "-C", str(here), "rev-parse", "--show-toplevel", "--short=12", "HEAD"],
                                     capture_output=True, text=True, check=True, timeout=10).stdout.split()
        dirty = subprocess.run(["git", "-C", str(here), "diff", "--quiet", "HEAD", "--"],
                               capture_output=True, check=False, timeout=30).returncode != 0
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if Path(top).resolve() != here:  # a copy of the source inside some other repository
        return None
    return f"{commit}-dirty" if dirty else commit


class BuildPyWithCommit(build_py):
    """``build_py`` that also writes the source commit into the built package (not in editable installs)."""

    def run(self) -> None:
        super().run()
        commit = None if self.editable_mode else source_commit()
        if commit:
            target = Path(self.build_lib) / COMMIT_FILE
            target.write_text(commit + "\n", encoding="utf-8")


packages = find_packages(include=["gpulens", "gpulens.*"], exclude=[f"gpulens.{f}*" for f in FOLDERS])
for folder in FOLDERS:
    packages += [f"gpulens.{name}" for name in find_namespace_packages(include=[folder, f"{folder}.*"])
                 if "__pycache__" not in name]

setup(packages=packages, package_dir={f"gpulens.{folder}": folder for folder in FOLDERS},
      cmdclass={"build_py": BuildPyWithCommit})
